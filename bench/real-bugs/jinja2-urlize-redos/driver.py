"""A forum renders its comment threads with a Jinja2 template that passes each comment through
the urlize filter, as Flask and Ansible users do. Some users paste console output, where a
progress indicator printed a long run of dots before "done" (CVE-2020-28493: urlize's punctuation
regex backtracks over such runs, quadratic in their length)."""

from jinja2 import Environment

TEMPLATE = Environment(autoescape=True).from_string(
    "{% for c in comments %}<article><h3>{{ c.author }}</h3>"
    "<p>{{ c.body|urlize(40, true) }}</p></article>\n{% endfor %}")

REPLIES = [
    "See https://docs.example.org/install#proxy for the proxy settings.",
    "Same here, fixed by upgrading (see www.example.com/changelog).",
    "Mail support@example.com with the log, they answer quickly.",
    "Works for me on 3.11, thanks!",
]
PASTE = ("Here is my log:\nResolving dependencies\nDownloading wheels"
         + "." * 2500 + "done\nInstalling" + "." * 2500 + "failed")


def thread(n):
    comments = [{"author": f"user{i}", "body": REPLIES[i % len(REPLIES)]} for i in range(40)]
    comments.insert(7, {"author": "op", "body": PASTE if n % 2 == 0 else REPLIES[0]})
    return comments


def main():
    pages = [TEMPLATE.render(comments=thread(n)) for n in range(8)]
    print(f"rendered {len(pages)} thread pages, {sum(map(len, pages))} characters")


if __name__ == "__main__":
    main()
