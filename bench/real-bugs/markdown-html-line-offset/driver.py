"""Convert a Markdown page that embeds a large raw HTML table (a generated compatibility matrix)
to HTML, the use in Python-Markdown/markdown#1392 (large HTML input made the HTML extraction
count lines from the start of the document for every tag)."""
import markdown

ROWS = 3800
parts = ["# Compatibility\n", "The matrix below is generated from the CI results.\n", "<table>"]
for r in range(ROWS):
    parts.append(f"<tr><td>pkg{r}</td><td>{r % 7}.{r % 13}</td><td>ok</td></tr>")
parts.append("</table>\n")
parts.append("See *the notes* for the [details](https://example.org/notes).\n")
text = "\n".join(parts)

html = markdown.markdown(text)
print(f"{len(text)} bytes of Markdown -> {len(html)} bytes of HTML")
