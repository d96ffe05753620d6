"""A web application under load with samprof's endpoints mounted at
/debug/pprof, on a real server from PyPI.

    python http_mounted_target.py waitress|uvicorn SECONDS

waitress serves a WSGI application (samprof.wsgi.PprofApp mounted under
SCRIPT_NAME /debug/pprof), uvicorn an ASGI one (samprof.asgi.PprofApp
under root_path /debug/pprof); any other path answers "app". Prints one
JSON line ({"port"}) once listening, then runs http_target.py's two load
threads until stdin closes or SECONDS pass, and exits.
"""

import json
import os
import socket
import sys
import threading

from http_target import alloc_load_for_http, cpu_load_for_http

import samprof.asgi
import samprof.wsgi

PREFIX = "/debug/pprof"


def wsgi_app():
    pprof = samprof.wsgi.PprofApp()

    def app(environ, start_response):
        path = environ.get("PATH_INFO", "")
        if path == PREFIX or path.startswith(PREFIX + "/"):
            environ["SCRIPT_NAME"] = environ.get("SCRIPT_NAME", "") + PREFIX
            environ["PATH_INFO"] = path[len(PREFIX) :]
            return pprof(environ, start_response)
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"app\n"]

    return app


def asgi_app():
    pprof = samprof.asgi.PprofApp()

    async def app(scope, receive, send):
        if scope["type"] == "http" and scope["path"].startswith(PREFIX):
            scope = dict(scope, root_path=scope.get("root_path", "") + PREFIX)
            await pprof(scope, receive, send)
            return
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"app\n"})

    return app


def main():
    kind, seconds = sys.argv[1], float(sys.argv[2])
    stop = threading.Event()
    loads = [
        threading.Thread(target=cpu_load_for_http, args=(stop,), daemon=True),
        threading.Thread(target=alloc_load_for_http, args=(stop,), daemon=True),
    ]
    for t in loads:
        t.start()

    def wait_then(action):
        waiter = threading.Thread(target=sys.stdin.read, daemon=True)
        waiter.start()
        waiter.join(seconds)
        stop.set()
        action()

    if kind == "waitress":
        from waitress import create_server

        server = create_server(wsgi_app(), host="127.0.0.1", port=0, threads=4)
        print(json.dumps({"port": server.effective_port}), flush=True)
        threading.Thread(target=server.run, daemon=True).start()
        wait_then(server.close)
    else:
        import uvicorn

        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        server = uvicorn.Server(uvicorn.Config(asgi_app(), log_level="warning", lifespan="off"))
        print(json.dumps({"port": sock.getsockname()[1]}), flush=True)

        def exit_server():
            server.should_exit = True

        threading.Thread(target=wait_then, args=(exit_server,), daemon=True).start()
        server.run(sockets=[sock])
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
