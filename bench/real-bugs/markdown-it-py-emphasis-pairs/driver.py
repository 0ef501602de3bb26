"""Render a thread of user comments to HTML, one of them a long run of emphasis markers
(`**...**a**...**`), the pathological input that markdown-it-py 3.0.0 made linear
(executablebooks/markdown-it-py#273, porting markdown-it's fix of the same quadratic case)."""
from markdown_it import MarkdownIt

md = MarkdownIt("commonmark")
comments = [f"Thanks **user{i}**, the _second_ option works for me: `pip install x=={i}`." for i in range(300)]
comments.append("**" * 3500 + "a" + "**" * 3500)

html = [md.render(text) for text in comments]
print(f"rendered {len(html)} comments, {sum(map(len, html))} bytes of HTML")
