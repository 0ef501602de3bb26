# Planted mistake: line 40 `template = jinja2.Environment(...).from_string(...)` — a new
# environment is created and the template parsed and compiled for every invoice.
# Expected kind: repeated-setup (template compile; fix: compile the template once, render per invoice).
# Scenario: render the HTML body of each customer's monthly invoice e-mail.
import random
import time

import jinja2

INVOICE_TEMPLATE = """\
<html><body>
<h1>Invoice {{ invoice.number }} for {{ customer.name | title }}</h1>
<p>Period: {{ invoice.period }}</p>
<table>
{% for item in invoice.lines %}
  <tr class="{{ loop.cycle('odd', 'even') }}">
    <td>{{ item.sku }}</td><td>{{ item.description | e }}</td>
    <td>{{ item.qty }}</td><td>{{ "%.2f" | format(item.price) }}</td>
    <td>{{ "%.2f" | format(item.qty * item.price) }}</td>
  </tr>
{% endfor %}
</table>
{% set total = invoice.lines | sum(attribute='line_total') %}
<p>Total due: {{ "%.2f" | format(total) }} {{ invoice.currency }}</p>
{% if customer.overdue %}<p class="warn">Your account is overdue.</p>{% endif %}
{% for note in invoice.notes %}<p>{{ note }}</p>{% endfor %}
</body></html>
"""


def make_invoice(i):
    items = [{"sku": f"S{j}", "description": f"Widget <{j}>", "qty": j % 5 + 1, "price": 9.5 + j} for j in range(random.randint(2, 6))]
    for it in items:
        it["line_total"] = it["qty"] * it["price"]
    customer = {"name": f"customer number {i}", "overdue": i % 7 == 0}
    return customer, {"number": f"INV-{i:06d}", "period": "2024-05", "lines": items, "currency": "EUR", "notes": ["Thank you."]}


def render_invoice(customer, invoice):
    template = jinja2.Environment(autoescape=True).from_string(INVOICE_TEMPLATE)  # CULPRIT
    return template.render(customer=customer, invoice=invoice)


def main():
    random.seed(1)
    start = time.monotonic()
    sent = 0
    for i in range(1500):
        if time.monotonic() - start > 8:
            break
        customer, invoice = make_invoice(i)
        html = render_invoice(customer, invoice)
        sent += len(html) > 0
    print(f"rendered {sent} invoices in {time.monotonic() - start:.1f}s")


if __name__ == "__main__":
    main()
