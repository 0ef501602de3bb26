"""Render a long tabular report (a few thousand pages of cells) to an in-memory PDF, the use in
reingart/pyfpdf#164 (a 12,000-page document whose output took 20 minutes)."""
from fpdf import FPDF

PAGES = 700
ROWS = 30

pdf = FPDF()
pdf.set_font("Helvetica", size=9)
for page in range(PAGES):
    pdf.add_page()
    for row in range(ROWS):
        pdf.cell(60, 6, f"order {page * ROWS + row}", border=1)
        pdf.cell(60, 6, f"customer {row % 17}", border=1)
        pdf.cell(40, 6, f"{(page * 31 + row * 7) % 1000}.{row:02d} EUR", border=1, ln=1)
document = pdf.output(dest="S")
print(f"{PAGES} pages, {len(document)} bytes")
