"""A slow-query report that pretty-prints the statements a MySQL server captured, with
sqlparse.format. The capture keeps the first 228 characters of each statement
(performance_schema.max_sql_text_length set low), so a long one is cut inside its string literal:
here a file-catalogue INSERT whose Windows path, its backslashes escaped, is left without its
closing quote (CVE-2023-30608 is the string regex's backtracking on that)."""

import sqlparse

CUT_AT = 228
ORDINARY = [
    "select o.id, o.total, c.name from orders o join customers c on c.id = o.customer_id "
    "where o.created_at > '2024-01-01' and o.status in ('paid', 'shipped') order by o.total desc",
    "update inventory set quantity = quantity - 1 where sku = 'AB-1234' and warehouse_id = 7",
    "select count(*) from sessions where user_id = 42 and expires_at > now()",
    "delete from cart_items where cart_id in (select id from carts where updated_at < '2024-01-01')",
]
PATH = "\\\\".join(["C:", "Users", "build", "workspace", "finance", "reports", "2024",
                     "north", "region-7", "stores", "store-118", "exports", "daily", "archive",
                     "march", "week-09", "monday", "xlsx", "final", "report.xlsx"])
LONG = ("insert into file_catalogue (host, path, size, modified) values ('ws-042', '"
        + PATH + "', 48213, '2024-03-01 10:00:00')")


def captured_statements():
    for n in range(200):
        yield ORDINARY[n % len(ORDINARY)][:CUT_AT]
        if n % 100 == 99:
            yield LONG[:CUT_AT]


def main():
    lines = 0
    for statement in captured_statements():
        pretty = sqlparse.format(statement, reindent=True, keyword_case="upper")
        lines += pretty.count("\n") + 1
    print(f"formatted the captured statements into {lines} lines")


if __name__ == "__main__":
    main()
