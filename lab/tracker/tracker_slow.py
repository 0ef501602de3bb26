"""An HTTP BitTorrent tracker (story 003, MonoTorrent): the slow version.

GET /announce?info_hash=..&peer_id=..&port=..&uploaded=..&downloaded=..&left=..&event=..&compact=1
answers a bencoded dictionary with the interval and a compact peer list (6 bytes per peer).
Every peer is kept with the whole parsed query it announced with, as MonoTorrent kept the
NameValueCollection: a dict of lists of strings per peer, most of which is never read again.

    python3 tracker_slow.py --port-file FILE [--port N]

Listens on 127.0.0.1; on SIGINT/SIGTERM prints one JSON line (peers, torrents, announces,
peak RSS) and exits.
"""

import socket
import struct
from urllib.parse import parse_qs

from server import serve

INTERVAL = 1800
NUMWANT = 50


class Peer:
    def __init__(self, params, ip):
        self.params = params
        self.ip = ip

    def compact(self):
        return socket.inet_aton(self.ip) + struct.pack(">H", int(self.params["port"][0]))


class Tracker:
    def __init__(self):
        self.torrents = {}
        self.announces = 0

    def announce(self, query, ip):
        params = parse_qs(query, keep_blank_values=True, encoding="latin-1")
        try:
            info_hash = params["info_hash"][0]
            peer_id = params["peer_id"][0]
            int(params["port"][0])
        except (KeyError, ValueError):
            return {b"failure reason": b"info_hash, peer_id and port are required"}
        torrent = self.torrents.setdefault(info_hash, {})
        self.announces += 1
        if params.get("event", [""])[0] == "stopped":
            torrent.pop(peer_id, None)
            return {b"interval": INTERVAL, b"peers": b""}
        torrent[peer_id] = Peer(params, ip)
        want = min(int(params.get("numwant", [NUMWANT])[0] or NUMWANT), NUMWANT)
        peers = b"".join(p.compact() for pid, p in zip(range(want + 1), torrent.values()) if p is not torrent[peer_id])
        return {b"interval": INTERVAL, b"peers": peers[: 6 * want]}

    def stats(self):
        return {"torrents": len(self.torrents), "peers": sum(len(t) for t in self.torrents.values()), "announces": self.announces}


if __name__ == "__main__":
    serve(Tracker())
