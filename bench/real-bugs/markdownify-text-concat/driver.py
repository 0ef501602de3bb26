"""Convert a long HTML page (a changelog-like article: thousands of paragraphs directly under one
element) to Markdown, the use in matthewwithanm/python-markdownify#162 and #186 (a 35 MB
document took 80 minutes)."""
from markdownify import markdownify

RELEASES = 350
parts = ["<html><body><article>"]
for r in range(RELEASES):
    parts.append(f"<h2>Release {r}.0</h2>")
    for i in range(10):
        parts.append(
            f"<p>Item {r}.{i}: the importer no longer drops the last row of a sheet when the "
            f"file ends without a newline, and reports the line of the first bad cell.</p>"
        )
parts.append("</article></body></html>")
html = "".join(parts)

markdown = markdownify(html, heading_style="ATX")
print(f"{len(html)} bytes of HTML -> {len(markdown)} bytes of Markdown")
