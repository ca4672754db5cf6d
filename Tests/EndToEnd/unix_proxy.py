"""A loopback TCP port that forwards each connection to a Unix socket, for HTTP tools that
cannot speak to one (schemathesis). drowsed identifies its callers by the socket's peer
credentials, so the proxy runs as the user whose calls it carries (setpriv).

    python3 unix_proxy.py PORT SOCKET      prints "ready" once listening; runs until killed
"""
import socket
import sys
import threading


def pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s, how in ((dst, socket.SHUT_WR), (src, socket.SHUT_RD)):
            try:
                s.shutdown(how)
            except OSError:
                pass


def serve(client: socket.socket, path: str) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(path)
    except OSError:
        client.close()
        return
    t = threading.Thread(target=pipe, args=(upstream, client), daemon=True)
    t.start()
    pipe(client, upstream)
    t.join()
    client.close()
    upstream.close()


def main() -> None:
    port, path = int(sys.argv[1]), sys.argv[2]
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", port))
    server.listen(16)
    print("ready", flush=True)
    while True:
        client, _ = server.accept()
        threading.Thread(target=serve, args=(client, path), daemon=True).start()


if __name__ == "__main__":
    main()
