"""A sign-up service normalising the hostnames users submit (their website, an e-mail domain) to
ASCII with idna.encode, rejecting the invalid ones. Most are ordinary internationalised names; a
few are the crafted labels of CVE-2024-3651 (many zero-width non-joiners between Arabic digits),
which idna rejects, but only after checking every joiner's context."""

import idna

ORDINARY = ["bücher.example", "münchen.de", "пример.рф", "例え.jp", "ドメイン名例.jp",
            "παράδειγμα.δοκιμή", "xn--nxasmq6b.com", "straße.de", "例子.中国", "bbc.co.uk"]
CRAFTED = "\u0628" + "\u0661\u200c" * 1100 + "\u0628.example"


def submissions():
    for n in range(3000):
        yield ORDINARY[n % len(ORDINARY)]
        if n % 1000 == 999:
            yield CRAFTED


def main():
    accepted = rejected = 0
    for hostname in submissions():
        try:
            idna.encode(hostname, uts46=True)
            accepted += 1
        except idna.IDNAError:
            rejected += 1
    print(f"accepted {accepted} hostnames, rejected {rejected}")


if __name__ == "__main__":
    main()
