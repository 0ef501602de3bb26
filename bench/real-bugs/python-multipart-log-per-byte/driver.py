"""An upload endpoint's form parsing: each request is a multipart/form-data body with a text field
and a small file, sent by a client that appends an epilogue after the closing boundary (RFC 2046
allows one; CVE-2024-53981 is about such bytes). The app logs warnings to a file, as servers do."""

import io
import logging
import os
import tempfile

from python_multipart import parse_form

BOUNDARY = "----WebKitFormBoundary7MA4YWxkTrZu0gW"
REQUESTS = 100
EPILOGUE = b"trailing client data " * 50  # ~1 KB after the last boundary


def body(n):
    return (
        f"--{BOUNDARY}\r\n"
        'Content-Disposition: form-data; name="title"\r\n\r\n'
        f"report {n}\r\n"
        f"--{BOUNDARY}\r\n"
        'Content-Disposition: form-data; name="upload"; filename="data.csv"\r\n'
        "Content-Type: text/csv\r\n\r\n"
        + "id,value\r\n" * 200
        + f"\r\n--{BOUNDARY}--\r\n"
    ).encode() + EPILOGUE


def handle(raw):
    fields, files = {}, {}
    headers = {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}",
               "Content-Length": str(len(raw))}
    parse_form(headers, io.BytesIO(raw),
               lambda f: fields.__setitem__(f.field_name, f.value),
               lambda f: files.__setitem__(f.field_name, f.size))
    return fields, files


def main():
    with tempfile.TemporaryDirectory() as tmp:
        logging.basicConfig(filename=os.path.join(tmp, "app.log"), level=logging.WARNING)
        uploaded = 0
        for n in range(REQUESTS):
            fields, files = handle(body(n))
            uploaded += files[b"upload"]
        logging.shutdown()
    print(f"parsed {REQUESTS} uploads, {uploaded} file bytes")


if __name__ == "__main__":
    main()
