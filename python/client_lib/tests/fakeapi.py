"""A scripted stand-in for trainq's REST API (http.server), for the unit
tests of request building and answer shapes. The e2e tests use the real API."""

import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Request:
    def __init__(self, method, path, query, headers, body):
        self.method, self.path, self.query, self.headers, self.body = method, path, query, headers, body

    def json(self):
        return json.loads(self.body)


class FakeAPI:
    """routes: {(method, path): handler}; a handler takes a Request and
    returns (status, headers dict, body) where body is bytes, a dict/list
    (sent as JSON) or an iterable of bytes chunks (sent chunked, flushed one
    by one; a None chunk drops the connection there)."""

    def __init__(self):
        self.routes = {}
        self.requests = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _serve(self):
                u = urllib.parse.urlsplit(self.path)
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                req = Request(self.command, u.path, urllib.parse.parse_qs(u.query, keep_blank_values=True), dict(self.headers), body)
                fake.requests.append(req)
                h = fake.routes.get((self.command, u.path))
                if h is None:
                    status, hdrs, out = 404, {}, {"error": {"code": "not_found", "message": "no route " + u.path}}
                else:
                    status, hdrs, out = h(req)
                if isinstance(out, (dict, list)):
                    out = json.dumps(out).encode()
                    hdrs = dict({"Content-Type": "application/json"}, **hdrs)
                self.send_response(status)
                for k, v in hdrs.items():
                    self.send_header(k, v)
                if isinstance(out, bytes):
                    self.send_header("Content-Length", str(len(out)))
                    self.end_headers()
                    self.wfile.write(out)
                    return
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for chunk in out:
                    if chunk is None:  # drop the connection mid-answer
                        self.close_connection = True
                        return
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

            do_GET = do_POST = do_DELETE = _serve

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    def route(self, method, path, handler=None, status=200, body=None, headers=None):
        if handler is None:
            def handler(req, status=status, body=body, headers=headers):
                return status, dict(headers or {}), body if body is not None else {}
        self.routes[(method, "/public/v2" + path)] = handler

    def close(self):
        self.server.shutdown()
        self.server.server_close()
