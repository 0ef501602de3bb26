"""A Tornado shop reads each request's cookies (HTTPServerRequest.cookies, what
RequestHandler.get_cookie uses). Its front end keeps the cart as JSON in a quoted cookie, the
quotes escaped with backslashes; a customer with a big cart sends a 4 KB one (the most a browser
keeps) with every request (CVE-2024-52804: unquoting re-searched the rest of the value for an
octal escape at every backslash, quadratic in the value's length)."""

import json

from tornado.httputil import HTTPHeaders, HTTPServerRequest

SMALL_CART = [{"sku": "A-1001", "qty": 1}]
BIG_CART = [{"sku": f"SKU-{n:05d}", "qty": 1 + n % 3, "gift": n % 7 == 0} for n in range(80)]


def cookie_header(cart):
    quoted = json.dumps(cart, separators=(",", ":")).replace('"', '\\"')
    return f'session=7f3a9c2e41d0; theme=dark; cart="{quoted}"'


def requests():
    small, big = cookie_header(SMALL_CART), cookie_header(BIG_CART)
    for n in range(3000):
        yield small
        if n % 4 == 3:
            yield big


def main():
    items = 0
    for header in requests():
        request = HTTPServerRequest(method="GET", uri="/cart", headers=HTTPHeaders({"Cookie": header}))
        items += len(json.loads(request.cookies["cart"].value))
    print(f"served the carts, {items} items in all")


if __name__ == "__main__":
    main()
