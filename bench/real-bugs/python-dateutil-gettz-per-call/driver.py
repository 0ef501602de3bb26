"""A notification service renders each event's time in its recipient's time zone, looking the
zone up by name with dateutil.tz.gettz for every event, as the dateutil docs show (the report
behind dateutil's gettz cache: each call opened and parsed the zoneinfo file again)."""

import datetime

from dateutil import tz

ZONES = ["Europe/Paris", "America/New_York", "Asia/Tokyo", "Australia/Sydney",
         "America/Sao_Paulo", "Asia/Kolkata", "Europe/London", "America/Los_Angeles"]
EVENTS = 12000


def render(n, start):
    when = start + datetime.timedelta(minutes=7 * n)
    zone = tz.gettz(ZONES[n % len(ZONES)])
    return when.astimezone(zone).strftime("%Y-%m-%d %H:%M %Z")


def main():
    start = datetime.datetime(2024, 3, 1, tzinfo=datetime.timezone.utc)
    rendered = [render(n, start) for n in range(EVENTS)]
    print(f"rendered {len(rendered)} event times, last {rendered[-1]}")


if __name__ == "__main__":
    main()
