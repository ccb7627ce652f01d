#!/usr/bin/python3
"""A local SMTP catcher for development and tests: a real SMTP server (Debian's python3-aiosmtpd)
that stores every mail it receives as a file NNNNNN.eml in a folder, with the envelope recipients
as X-Envelope-To headers on top, and prints one line per mail.

    /usr/bin/python3 scripts/mailcatcher.py --dir .tmp/run/mail --port 2525

--port 0 picks a free port; the first line printed is "listening on HOST:PORT".
"""
import argparse
import asyncio
import email
import itertools
import os
import sys

from aiosmtpd.smtp import SMTP


class Store:
    def __init__(self, folder):
        self.folder = folder
        os.makedirs(folder, exist_ok=True)
        existing = [int(n[:6]) for n in os.listdir(folder) if n.endswith(".eml") and n[:6].isdigit()]
        self.seq = itertools.count(max(existing, default=0) + 1)

    async def handle_DATA(self, server, session, envelope):
        n = next(self.seq)
        head = "".join("X-Envelope-To: %s\r\n" % r for r in envelope.rcpt_tos)
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
    a = p.parse_args()
    handler = Store(a.dir)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: SMTP(handler, hostname="mailcatcher"), a.host, a.port)
    host, port = server.sockets[0].getsockname()[:2]
    print("listening on %s:%d, mails in %s" % (host, port, os.path.abspath(a.dir)), flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
