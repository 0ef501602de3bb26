"""An HTML fragment service: GET /card?user=N renders a user's profile card.

    python3 render_api.py PORT

The planted mistake: the Jinja2 environment and template are built and compiled on
every request instead of once. Listens on 127.0.0.1 only.
"""

# load: /card?user={{int 1 4999}}
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import jinja2

CARD = """
<div class="card" id="user-{{ user.id }}">
  <h2>{{ user.name | title }}</h2>
  {% if user.admin %}<span class="badge">admin</span>{% endif %}
  <ul>{% for tag in user.tags %}<li class="{{ loop.cycle('odd', 'even') }}">{{ tag | e }}</li>{% endfor %}</ul>
  <p>{{ user.bio | truncate(80) }}</p>
  {% macro link(href, text) %}<a href="{{ href }}">{{ text }}</a>{% endmacro %}
  <footer>{{ link('/users/' ~ user.id, 'profile') }} · {{ link('/users/' ~ user.id ~ '/posts', 'posts') }}</footer>
</div>
"""


def user(n: int) -> dict:
    return {"id": n, "name": f"user number {n}", "admin": n % 7 == 0, "tags": [f"tag{n % k}" for k in range(2, 9)], "bio": "lorem ipsum " * 12}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    wbufsize = 64 * 1024

    def do_GET(self) -> None:
        n = int(parse_qs(urlparse(self.path).query).get("user", ["1"])[0])
        template = jinja2.Environment(autoescape=True).from_string(CARD)  # CULPRIT
        body = template.render(user=user(n)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
