"""A paste service highlights the JavaScript snippets users paste, with pygments.highlight and the
JavascriptLexer, after cutting each paste at its size limit. A paste of a Windows build script is
cut inside a string of escaped backslashes (CVE-2021-27291: the lexer's string regex backtracks
exponentially in the backslashes of an unterminated string)."""

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import JavascriptLexer

LIMIT = 272
SNIPPETS = [
    "function debounce(fn, ms) {\n  let t;\n  return (...args) => {\n    clearTimeout(t);\n"
    "    t = setTimeout(() => fn.apply(this, args), ms);\n  };\n}\n",
    "const res = await fetch('/api/items?page=' + page, {headers: {'Accept': 'application/json'}});\n"
    "const {items, next} = await res.json();\nitems.forEach(i => list.append(render(i)));\n",
    "export default class Cache {\n  constructor(max = 100) { this.max = max; this.map = new Map(); }\n"
    "  get(k) { const v = this.map.get(k); if (v !== undefined) { this.map.delete(k); "
    "this.map.set(k, v); } return v; }\n}\n",
]
BUILD_SCRIPT = (
    "const path = require('path');\nconst { execSync } = require('child_process');\n"
    "// copy the release to the shared drive\n"
    'const target = "\\\\\\\\fileserver\\\\releases\\\\' + "\\\\".join(
        ["desktop", "win64", "2024", "03", "nightly", "build-1187", "app", "resources", "bin",
         "x64", "release", "signed", "installer", "payload", "data", "locales", "en-us",
         "strings"]) + '\\\\app.json";\nexecSync(`xcopy dist ${target} /E /Y`);\n'
)


def pastes():
    for n in range(90):
        yield SNIPPETS[n % len(SNIPPETS)][:LIMIT]
        if n % 45 == 44:
            yield BUILD_SCRIPT[:LIMIT]


def main():
    formatter = HtmlFormatter(linenos=True)
    pages = [highlight(paste, JavascriptLexer(), formatter) for paste in pastes()]
    print(f"highlighted {len(pages)} pastes, {sum(map(len, pages))} bytes of HTML")


if __name__ == "__main__":
    main()
