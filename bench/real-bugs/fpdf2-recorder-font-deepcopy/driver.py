"""Render a split-times report with a Unicode TrueType font, keeping each runner's block on one
page with `with pdf.unbreakable()`, the use in py-pdf/fpdf2#1444 (an 11-page table report went
from 1.8 s with 2.6.0 to 30 s with 2.8.3)."""
import pathlib
import sys

from fpdf import FPDF

FONT = pathlib.Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")  # Debian: fonts-dejavu-core
if not FONT.exists():
    sys.exit(f"this driver needs the DejaVu Sans font at {FONT} (Debian package fonts-dejavu-core)")

RUNNERS = 16
pdf = FPDF()
pdf.add_font("DejaVu", fname=str(FONT))
pdf.set_font("DejaVu", size=9)
pdf.add_page()
for runner in range(RUNNERS):
    with pdf.unbreakable() as block:
        block.cell(0, 6, f"Läufer {runner} — Zwischenzeiten", new_x="LMARGIN", new_y="NEXT")
        for leg in range(8):
            block.cell(40, 5, f"Posten {leg + 1}")
            block.cell(40, 5, f"{runner % 60:02d}:{leg * 7 % 60:02d}")
            block.cell(40, 5, f"+{leg * 13 % 90} s", new_x="LMARGIN", new_y="NEXT")
document = pdf.output()
print(f"{RUNNERS} runners, {pdf.pages_count} pages, {len(document)} bytes")
