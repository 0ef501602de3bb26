"""The product-catalog API of catalog_api.py, served over HTTPS, for profiling a TLS server
under load (`onefix record --load "https://127.0.0.1:PORT/... --insecure" -- ...`).

    python3 catalog_https.py PORT CERT.pem KEY.pem [--fixed]

Same requests and the same planted mistake as catalog_api.py (the settings parsed again on
every request, unless --fixed); the listening socket is wrapped with the standard library's
ssl module. Listens on 127.0.0.1 only.
"""

# load: /price?sku={{int 0 3999}}
import os
import ssl
import sys
from http.server import ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import catalog_api  # noqa: E402


def main() -> None:
    port, cert, key = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    if not catalog_api.FIXED:
        catalog_api.write_settings()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = ThreadingHTTPServer(("127.0.0.1", port), catalog_api.Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        os.unlink(catalog_api.SETTINGS_PATH)


if __name__ == "__main__":
    main()
