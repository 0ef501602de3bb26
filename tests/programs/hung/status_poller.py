"""Asks a status server for its state and waits for the answer with no timeout: when the server
accepts but never answers, the program hangs in the read (onefix dump says where, and on what)."""
import socket
import sys


def fetch_status(host, port):
    with socket.create_connection((host, port)) as conn:
        conn.sendall(b"STATUS\n")
        return conn.recv(4096)  # HANGS-HERE


if __name__ == "__main__":
    print(fetch_status("127.0.0.1", int(sys.argv[1])))
