"""An HTTP BitTorrent tracker (story 003, MonoTorrent): the fixed version.

Same protocol as tracker_slow.py. Each peer is kept as the 6 bytes of its compact form (IPv4
address and port), the only thing a response needs: the parsed query is dropped once read.

    python3 tracker_fixed.py --port-file FILE [--port N]
"""

import socket
import struct
from urllib.parse import parse_qs

from server import serve

INTERVAL = 1800
NUMWANT = 50


class Tracker:
    def __init__(self):
        self.torrents = {}
        self.announces = 0

    def announce(self, query, ip):
        params = parse_qs(query, keep_blank_values=True, encoding="latin-1")
        try:
            info_hash = params["info_hash"][0]
            peer_id = params["peer_id"][0]
            port = int(params["port"][0])
        except (KeyError, ValueError):
            return {b"failure reason": b"info_hash, peer_id and port are required"}
        torrent = self.torrents.setdefault(info_hash, {})
        self.announces += 1
        if params.get("event", [""])[0] == "stopped":
            torrent.pop(peer_id, None)
            return {b"interval": INTERVAL, b"peers": b""}
        mine = socket.inet_aton(ip) + struct.pack(">H", port)
        torrent[peer_id] = mine
        want = min(int(params.get("numwant", [NUMWANT])[0] or NUMWANT), NUMWANT)
        peers = b"".join(p for _, p in zip(range(want + 1), torrent.values()) if p is not mine)
        return {b"interval": INTERVAL, b"peers": peers[: 6 * want]}

    def stats(self):
        return {"torrents": len(self.torrents), "peers": sum(len(t) for t in self.torrents.values()), "announces": self.announces}


if __name__ == "__main__":
    serve(Tracker())
