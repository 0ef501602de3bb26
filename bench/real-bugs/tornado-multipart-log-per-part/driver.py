"""A Tornado service parses the form bodies it receives with tornado.httputil.parse_body_arguments
(what RequestHandler does for each request) and logs warnings to a file. One client sends a
malformed multipart body, a boundary repeated many times with parts that lack headers
(CVE-2025-47287: Tornado logged a warning for every such part and went on parsing)."""

import logging
import os
import tempfile

from tornado.httputil import HTTPInputError, parse_body_arguments

BOUNDARY = "1d3a0f7bc6e7a9b2"
CONTENT_TYPE = f"multipart/form-data; boundary={BOUNDARY}"


def upload(n):
    return (
        f"--{BOUNDARY}\r\n"
        'Content-Disposition: form-data; name="caption"\r\n\r\n'
        f"photo {n}\r\n"
        f"--{BOUNDARY}\r\n"
        f'Content-Disposition: form-data; name="photo"; filename="img{n}.jpg"\r\n'
        "Content-Type: image/jpeg\r\n\r\n"
        + "\xff\xd8\xff\xe0" * 256 + "\r\n"
        f"--{BOUNDARY}--\r\n"
    ).encode("latin-1")


MALFORMED = (f"--{BOUNDARY}\r\nx\r\n" * 25000 + f"--{BOUNDARY}--\r\n").encode()


def bodies():
    for n in range(2000):
        yield upload(n)
        if n % 500 == 499:
            yield MALFORMED


def main():
    with tempfile.TemporaryDirectory() as tmp:
        logging.basicConfig(filename=os.path.join(tmp, "server.log"), level=logging.WARNING)
        files = rejected = 0
        for body in bodies():
            arguments, uploaded = {}, {}
            try:
                parse_body_arguments(CONTENT_TYPE, body, arguments, uploaded)
            except HTTPInputError:
                rejected += 1
            files += len(uploaded.get("photo", []))
        logging.shutdown()
    print(f"parsed {files} uploaded files, rejected {rejected} bodies")


if __name__ == "__main__":
    main()
