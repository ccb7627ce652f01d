#!/usr/bin/python3
"""A local SMTP catcher for development and tests: a real SMTP server (Debian's python3-aiosmtpd)
that stores every mail it receives as a file NNNNNN.eml in a folder, with the envelope recipients
as X-Envelope-To headers on top, and prints one line per mail.

    /usr/bin/python3 scripts/mailcatcher.py --dir .tmp/run/mail --port 2525

--port 0 picks a free port; the first line printed is "listening on HOST:PORT". With --tls
starttls|tls (and --tls-cert, --tls-key) it requires STARTTLS or speaks TLS from the first byte;
with --auth-user and --auth-password-file it requires that login. Each stored mail then also
says X-Catcher-TLS: yes|no and X-Catcher-Login: USER.
"""
import argparse
import asyncio
import email
import itertools
import os
import ssl
import sys

from aiosmtpd.smtp import SMTP, AuthResult


class Store:
    def __init__(self, folder):
        self.folder = folder
        os.makedirs(folder, exist_ok=True)
        existing = [int(n[:6]) for n in os.listdir(folder) if n.endswith(".eml") and n[:6].isdigit()]
        self.seq = itertools.count(max(existing, default=0) + 1)

    async def handle_DATA(self, server, session, envelope):
        n = next(self.seq)
        head = "".join("X-Envelope-To: %s\r\n" % r for r in envelope.rcpt_tos)
        tls = session.ssl is not None or server.transport.get_extra_info("ssl_object") is not None
        head += "X-Catcher-TLS: %s\r\n" % ("yes" if tls else "no")
        if session.authenticated:
            head += "X-Catcher-Login: %s\r\n" % session.auth_data.login.decode()
        data = head.encode() + envelope.original_content
        path = os.path.join(self.folder, "%06d.eml" % n)
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.rename(tmp, path)  # whole files only: readers never see half a mail
        subject = email.message_from_bytes(envelope.original_content).get("Subject", "")
        print("mail %s to %s: %s" % (path, ", ".join(envelope.rcpt_tos), subject), flush=True)
        return "250 OK"


async def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--dir", required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=2525)
    p.add_argument("--tls", choices=["none", "starttls", "tls"], default="none")
    p.add_argument("--tls-cert")
    p.add_argument("--tls-key")
    p.add_argument("--auth-user")
    p.add_argument("--auth-password-file")
    a = p.parse_args()
    handler = Store(a.dir)
    ctx = None
    if a.tls != "none":
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(a.tls_cert, a.tls_key)
    opts = {"hostname": "mailcatcher"}
    if a.tls == "starttls":
        opts.update(tls_context=ctx, require_starttls=True)
    if a.auth_user:
        with open(a.auth_password_file) as f:
            password = f.read().rstrip("\n")

        def authenticator(server, session, envelope, mechanism, data):
            ok = data.login.decode() == a.auth_user and data.password.decode() == password
            return AuthResult(success=ok, handled=False, auth_data=data if ok else None)

        opts.update(authenticator=authenticator, auth_required=True, auth_require_tls=a.tls == "starttls")
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: SMTP(handler, **opts), a.host, a.port,
                                      ssl=ctx if a.tls == "tls" else None)
    host, port = server.sockets[0].getsockname()[:2]
    print("listening on %s:%d, mails in %s" % (host, port, os.path.abspath(a.dir)), flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
