"""A link checker validating the URLs found in user-submitted posts with urllib3's parse_url
before fetching them, rejecting the ones that do not parse. Most links are ordinary; a few spam
posts carry a link whose authority is a long run of '@' (CVE-2021-33503: the authority regex
backtracks over every '@' before it fails)."""

from urllib3.exceptions import LocationParseError
from urllib3.util import parse_url

ORDINARY = [
    "https://example.com/articles/2024/03/performance?ref=feed",
    "http://user:secret@files.internal.example:8080/export.csv",
    "https://[2001:db8::1]:8443/status",
    "https://docs.python.org/3/library/urllib.parse.html#module-urllib.parse",
    "http://192.168.1.20/admin/login?next=%2Fdashboard",
]
SPAM = "https://" + "@" * 3500 + ":x/"


def links():
    for n in range(20000):
        yield ORDINARY[n % len(ORDINARY)]
        if n % 7000 == 6999:
            yield SPAM


def main():
    hosts, rejected = set(), 0
    for link in links():
        try:
            hosts.add(parse_url(link).host)
        except LocationParseError:
            rejected += 1
    print(f"checked links to {len(hosts)} hosts, rejected {rejected}")


if __name__ == "__main__":
    main()
