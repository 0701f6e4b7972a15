"""`boxctl mcp` as an MCP agent sees it, through the official Python MCP SDK (tests/mcp/run.sh
starts brokerd and runs this inside its network namespace).

With the SDK's stdio client (one `boxctl mcp` process per session):
  - tools/list: brokerd's tools for the grant with their schemas, truthful annotations, and
    read_result;
  - each tool called for real: read_file, write_file, shell, http_fetch (which runs and fails:
    its namespace has no network), and a cut output paged to its end with read_result;
  - refusals and bad arguments as isError results: a path outside the grant, a host outside
    it, arguments that do not match the schema, an unknown tool, an unknown result_id;
  - an ask accepted, declined and cancelled through elicitation, and refused to a client
    without elicitation (the ticket is never shown).
Then over raw stdio, where the SDK would not send what is sent: malformed JSON-RPC, an unknown
method, parameters of the wrong shape, a 10 MiB line (each a JSON-RPC error, the server
serving on), a cancelled call (it finishes and is audited, the process waits for it), the same
after SIGTERM, and a client that goes away while the owner is being asked (the ticket is
declined).

Prints a transcript, `ok NAME` or `FAIL NAME: why` per check and `N passed, M failed`; exits
non-zero on any failure.
"""

import argparse
import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time

import mcp.types as types
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

passed = 0
failed = 0
# What brokerd's tickets look like (128 random bits in hex).
TICKET = re.compile(r"[0-9a-f]{32}")


def check(name, ok, why=""):
    global passed, failed
    if ok:
        passed += 1
        print(f"ok {name}")
    else:
        failed += 1
        print(f"FAIL {name}: {why}")


def show(direction, what):
    text = what if isinstance(what, str) else json.dumps(what)
    if len(text) > 300:
        text = text[:240] + f" ...[{len(text) - 240} more]"
    print(f"  {direction} {text}")


def text_of(result):
    return "".join(c.text for c in result.content if getattr(c, "type", "") == "text")


class Bridge:
    """One `boxctl mcp` process through the SDK's stdio client."""

    def __init__(self, args, grant, elicit=None, session=None):
        extra = ["--session", session] if session else []
        self.params = StdioServerParameters(
            command=args.boxctl, args=["--socket", args.socket, "mcp", "--grant", grant] + extra
        )
        self.elicit = elicit
        self.asked = []

    async def __aenter__(self):
        self._client = stdio_client(self.params)
        read, write = await self._client.__aenter__()
        callback = None
        if self.elicit is not None:

            async def callback(context, params):
                self.asked.append(params)
                show("<- elicitation/create", params.message)
                show("-> elicitation answer", self.elicit)
                return types.ElicitResult(action=self.elicit, content={} if self.elicit == "accept" else None)

        self._session = ClientSession(read, write, elicitation_callback=callback)
        await self._session.__aenter__()
        self.init = await self._session.initialize()
        return self

    async def __aexit__(self, *exc):
        await self._session.__aexit__(*exc)
        await self._client.__aexit__(*exc)

    async def call(self, tool, arguments):
        show("-> tools/call", {"name": tool, "arguments": arguments})
        r = await self._session.call_tool(tool, arguments)
        show("<-", {"isError": r.is_error, "text": text_of(r)})
        return r

    async def list_tools(self):
        return await self._session.list_tools()


def audit(args):
    with open(args.audit) as f:
        return [json.loads(line) for line in f if line.strip()]


async def sdk_checks(args):
    rw = os.path.join(args.work, "rw")
    ro = os.path.join(args.work, "ro")
    print("== grant work (auto), a client with elicitation")
    async with Bridge(args, "work", elicit="accept") as b:
        info = b.init
        show("<- initialize", {"server": info.server_info.name, "protocol": info.protocol_version})
        check("initialize names boxmaker and offers tools", info.server_info.name == "boxmaker" and info.capabilities.tools is not None, repr(info))
        check("instructions name the grant", "\"work\"" in (info.instructions or ""), repr(info.instructions))

        listed = (await b.list_tools()).tools
        show("<- tools/list", [t.name for t in listed])
        names = [t.name for t in listed]
        check("tools/list: the grant's tools and read_result", sorted(names) == sorted(["read_file", "write_file", "shell", "http_fetch", "read_result"]), names)
        broker = json.loads(subprocess.run([args.boxctl, "--socket", args.socket, "tools", "work"], capture_output=True, text=True, check=True).stdout)
        by_name = {t.name: t for t in listed}
        for t in broker["tools"]:
            m = by_name.get(t["name"])
            check(f"tools/list: {t['name']} has brokerd's description and schema", m is not None and m.description == t["description"] and m.input_schema == t["parameters"], f"{m!r} vs {t!r}")
        hints = {
            "read_file": (True, False, False),
            "http_fetch": (True, False, True),
            "write_file": (False, True, False),
            "shell": (False, True, False),
            "read_result": (True, False, False),
        }
        for name, want in hints.items():
            a = by_name[name].annotations if name in by_name else None
            got = a and (a.read_only_hint, a.destructive_hint, a.open_world_hint)
            check(f"annotations of {name} (readOnly, destructive, openWorld)", got == want, f"{got} != {want}")

        r = await b.call("read_file", {"path": f"{ro}/hello.txt"})
        check("read_file runs and is labelled", not r.is_error and text_of(r).startswith("[work/read_file]\n") and "read through MCP" in text_of(r), text_of(r))

        r = await b.call("write_file", {"path": f"{rw}/note.txt", "content": "written through MCP\n"})
        on_host = open(f"{rw}/note.txt").read() if os.path.exists(f"{rw}/note.txt") else None
        check("write_file runs and the file is on the host", not r.is_error and on_host == "written through MCP\n", f"{text_of(r)!r}, file {on_host!r}")

        r = await b.call("shell", {"command": "cat note.txt", "cwd": rw})
        check("shell runs in the grant's directory", not r.is_error and text_of(r).startswith("[work/shell]\nwritten through MCP\n"), text_of(r))

        n = 30000
        r = await b.call("shell", {"command": f"seq 1 {n}"})
        t = text_of(r)
        rid = None
        marker = 'read_result {"result_id":"'
        if marker in t:
            rid = t.split(marker, 1)[1].split('"', 1)[0]
        check("a long output is cut and says how to read the rest", not r.is_error and rid is not None and t.startswith("[work/shell]\n1\n2\n"), t[:200])
        # The note names where the cut begins: the preview's head is the output up to there.
        head = t[len("[work/shell]\n"):].split("\n[... ", 1)[0]
        at = json.loads(t.split("read_result ", 1)[1].split("}", 1)[0] + "}")["offset"] if rid else None
        check("the cut note reads on from where the preview's head ends", at == len(head) and at > 0 and f"continues at offset {at}:" in t, f"offset {at}, head of {len(head)} chars")
        whole, offset, pages = "", 0, 0
        while rid is not None and pages < 50:
            p = await b.call("read_result", {"result_id": rid, "offset": offset})
            pt = text_of(p)
            if p.is_error:
                break
            pages += 1
            body, _, note = pt.rpartition("\n[boxmaker: ")
            whole += body
            if note.startswith("end of the output]"):
                break
            offset = json.loads(note.split("read_result ", 1)[1].rstrip("]"))["offset"]
        want = "".join(f"{i}\n" for i in range(1, n + 1)) + "\n[exit 0]"
        check(f"read_result pages the whole output to its end ({pages} pages)", whole == want and pages >= 3, f"{len(whole)} chars in {pages} pages, want {len(want)}")

        r = await b.call("read_file", {"path": "/etc/shadow"})
        check("a path outside the grant is refused, as an error result", r.is_error and text_of(r).startswith('refused by the grant "work"'), text_of(r))
        r = await b.call("http_fetch", {"url": "https://example.com/"})
        check("a host outside the grant is refused", r.is_error and text_of(r).startswith("refused by the grant"), text_of(r))
        r = await b.call("read_file", {"file": "hello.txt"})
        check("arguments that do not match the schema are an error result", r.is_error and "nothing ran" in text_of(r), text_of(r))
        r = await b.call("shell", {"command": 42})
        check("an argument of the wrong type is an error result", r.is_error, text_of(r))
        r = await b.call("format_disk", {})
        check("an unknown tool is an error result", r.is_error, text_of(r))
        r = await b.call("read_result", {"result_id": "0" * 32})
        check("an unknown result_id is an error result", r.is_error and "brokerd answered an error" in text_of(r), text_of(r))
        r = await b.call("read_result", {"offset": 1})
        check("read_result without result_id is an error result", r.is_error, text_of(r))
        # http_fetch runs (sandbox, egress proxy and curl) and reaches nothing: this namespace
        # has no network, so the proxy resolves no name.
        r = await b.call("http_fetch", {"url": "https://docs.example.org/"})
        check("http_fetch runs through the egress proxy, which reaches nothing here", not r.is_error and text_of(r).startswith("[work/http_fetch]\n") and "SOCKS5" in text_of(r), text_of(r))
        check("no elicitation in an auto grant for these calls", b.asked == [], b.asked)

    print("== grant review (ask): the owner accepts")
    async with Bridge(args, "review", elicit="accept") as b:
        r = await b.call("write_file", {"path": f"{rw}/approved.txt", "content": "approved\n"})
        msg = b.asked[0].message if b.asked else ""
        check("an ask becomes one elicitation naming the grant and the path, not the ticket", len(b.asked) == 1 and '"review"' in msg and "approved.txt" in msg and not TICKET.search(msg), msg)
        ok = os.path.exists(f"{rw}/approved.txt") and open(f"{rw}/approved.txt").read() == "approved\n"
        check("accepted: the call runs with its ticket", not r.is_error and ok, text_of(r))
        r = await b.call("read_file", {"path": f"{rw}/approved.txt"})
        check("a read in an ask grant runs without asking", not r.is_error and len(b.asked) == 1, text_of(r))

    for action in ["decline", "cancel"]:
        print(f"== grant review (ask): the owner answers {action}")
        async with Bridge(args, "review", elicit=action) as b:
            path = f"{rw}/{action}d.txt"
            r = await b.call("write_file", {"path": path, "content": "no\n"})
            check(f"{action}: an error result, nothing written", r.is_error and text_of(r) == "the owner declined this call; nothing ran" and not os.path.exists(path) and len(b.asked) == 1, text_of(r))

    print("== grant review (ask): a client without elicitation")
    async with Bridge(args, "review", elicit=None) as b:
        path = f"{rw}/unasked.txt"
        r = await b.call("write_file", {"path": path, "content": "no\n"})
        t = text_of(r)
        check("no elicitation: an error result saying the owner must approve, and how", r.is_error and "asks the owner" in t and "elicitation" in t and "never approved on the model's word" in t and not os.path.exists(path), t)
        check("the ticket (32 hex digits) is never shown to the model", not TICKET.search(t), t)

    records = audit(args)
    decisions = [r.get("decision") for r in records if r.get("grant") == "review"]
    check("brokerd audited the asks, the approval and the declines", decisions.count("ask") == 4 and decisions.count("approved") == 1 and decisions.count("declined") == 2, decisions)

    print("== grant draft (staged): writes wait for the owner's commit")
    draft = os.path.join(args.work, "draft")
    session = "mcp-draft"
    target = f"{draft}/staged.txt"
    async with Bridge(args, "draft", session=session) as b:
        names = [t.name for t in (await b.list_tools()).tools]
        check("tools/list of a staged grant offers staged_changes", "staged_changes" in names, names)
        r = await b.call("write_file", {"path": target, "content": "staged through MCP\n"})
        check("a write to a staged grant runs and leaves the real directory alone", not r.is_error and not os.path.exists(target), text_of(r))
        r = await b.call("read_file", {"path": target})
        check("the session reads its own staged write", not r.is_error and "staged through MCP" in text_of(r), text_of(r))
        r = await b.call("staged_changes", {})
        t = text_of(r)
        check("staged_changes lists the staged file, awaiting the owner", not r.is_error and "1 staged change(s)" in t and "staged.txt" in t and "awaiting the owner's commit" in t, t)
        r = await b.call("staged_changes", {"diff": True})
        check("staged_changes with diff shows the staged text", not r.is_error and "+staged through MCP" in text_of(r), text_of(r))
        r = await b.call("staged_changes", {"diff": "yes"})
        check("staged_changes with a bad argument is an error result", r.is_error, text_of(r))
        names = [t.name for t in (await b.list_tools()).tools]
        check("the model gets no tool to commit, discard or approve", not any(n in names for n in ["commit", "discard", "approve"]), names)
    done = subprocess.run([args.boxctl, "--socket", args.socket, "commit", "--session", session], capture_output=True, text=True)
    landed = open(target).read() if os.path.exists(target) else None
    check("the owner's commit puts the staged file in the real directory", done.returncode == 0 and landed == "staged through MCP\n", f"exit {done.returncode}: {done.stdout}{done.stderr}; file {landed!r}")
    committed = [r for r in audit(args) if r.get("decision") == "committed" and r.get("session") == session]
    check("the commit is audited with its path", len(committed) == 1 and any(p.get("path") == target for p in committed[0].get("paths", [])), committed)


class Raw:
    """`boxctl mcp` over raw stdio: one JSON-RPC line at a time."""

    def __init__(self, args, grant, elicitation=False):
        self.p = subprocess.Popen(
            [args.boxctl, "--socket", args.socket, "mcp", "--grant", grant],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        caps = {"elicitation": {"form": {}}} if elicitation else {}
        self.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": caps, "clientInfo": {"name": "raw", "version": "0"}}})
        self.init = self.read()
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, msg):
        line = msg if isinstance(msg, (bytes, str)) else json.dumps(msg)
        if isinstance(line, str):
            line = line.encode()
        show("->", line.decode(errors="replace"))
        self.p.stdin.write(line + b"\n")
        self.p.stdin.flush()

    def read(self):
        line = self.p.stdout.readline()
        show("<-", line.decode(errors="replace").strip() or "(closed)")
        return json.loads(line) if line.strip() else None

    def until_id(self, want):
        while True:
            m = self.read()
            if m is None or m.get("id") == want:
                return m

    def close(self, timeout=30):
        self.p.stdin.close()
        t0 = time.monotonic()
        rc = self.p.wait(timeout=timeout)
        err = self.p.stderr.read().decode(errors="replace")
        return rc, time.monotonic() - t0, err


def raw_checks(args):
    rw = os.path.join(args.work, "rw")
    print("== raw stdio: bad input, each followed by a ping that must be answered")
    r = Raw(args, "work")
    check("raw initialize", r.init is not None and "result" in r.init, r.init)
    ping = [100]

    def then_ping(line, answer_to=None):
        """Sends `line` and a ping. Returns what came back other than the ping's answer (up to
        that answer and, when `answer_to` is an id, the answer to it: requests are served
        concurrently) and whether the ping was answered."""
        r.send(line)
        ping[0] += 1
        r.send({"jsonrpc": "2.0", "id": ping[0], "method": "ping"})
        got, alive = [], False
        while not alive or (answer_to is not None and not any(m.get("id") == answer_to for m in got)):
            m = r.read()
            if m is None:
                return got, False
            if m.get("id") == ping[0]:
                alive = "result" in m
                continue
            got.append(m)
        return got, alive

    def codes(got):
        return [m.get("error", {}).get("code") for m in got]

    got, alive = then_ping("{this is not json")
    # Unparsable input has no id to answer: ignored, as the official SDKs do (no error storm).
    check("malformed JSON: ignored or a parse error, and the server serves on", alive and codes(got) in ([], [-32700]), got)
    got, alive = then_ping({"jsonrpc": "2.0", "id": "x", "result": 1, "method": 7})
    check("JSON that is no JSON-RPC message: invalid request, and the server serves on", alive and codes(got) == [-32600], got)
    got, alive = then_ping({"jsonrpc": "2.0", "id": 2, "method": "frobnicate", "params": {}}, answer_to=2)
    check("unknown method: method not found", alive and codes(got) == [-32601], got)
    got, alive = then_ping({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "shell", "arguments": ["ls"]}}, answer_to=3)
    # The SDK cannot read such a request as a tools/call; which code it picks is its choice.
    check("tools/call with arguments that are not an object: a JSON-RPC error", alive and len(got) == 1 and got[0].get("id") == 3 and "error" in got[0], got)
    big = {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "write_file", "arguments": {"path": f"{rw}/big.txt", "content": "x" * (10 * 1024 * 1024)}}}
    got, alive = then_ping(big, answer_to=4)
    res = got[0].get("result", {}) if len(got) == 1 and got[0].get("id") == 4 else {}
    text = "".join(c.get("text", "") for c in res.get("content", []))
    check("a 10 MiB request: an error result, brokerd never sees it, nothing written", alive and res.get("isError") is True and "nothing ran" in text and not os.path.exists(f"{rw}/big.txt"), got)
    got, alive = then_ping(json.dumps({"jsonrpc": "2.0", "id": 5, "method": "ping", "params": {"pad": "y" * (20 * 1024 * 1024)}}))
    check("a 20 MiB line: dropped unread, and the server serves on", alive and got == [], got)

    print("== raw stdio: a cancelled call finishes, is audited, and the process waits for it")
    r.send({"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"name": "shell", "arguments": {"command": "sleep 2; echo finished > cancelled.txt", "cwd": rw}}})
    time.sleep(0.5)
    r.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 6, "reason": "the user pressed stop"}})
    rc, took, err = r.close()
    show("exit", f"{rc} after {took:.1f}s")
    check("the bridge exits 0 once its client is gone, without a panic", rc == 0 and "panicked" not in err, err[-500:])
    done = os.path.exists(f"{rw}/cancelled.txt")
    check("the cancelled call ran to its end", done and took >= 1.0, f"file {done}, exit after {took:.1f}s")
    ran = [x for x in audit(args) if x.get("decision") == "ran" and "sleep 2" in (x.get("target") or "")]
    check("and brokerd audited how it ended", len(ran) == 1 and ran[0].get("status") == "result", ran)

    print("== raw stdio: SIGTERM while a call runs: the call finishes, then the process exits")
    r = Raw(args, "work")
    r.send({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "shell", "arguments": {"command": "sleep 2; echo finished > terminated.txt", "cwd": rw}}})
    time.sleep(0.5)
    show("-> SIGTERM", "")
    t0 = time.monotonic()
    r.p.send_signal(signal.SIGTERM)
    rc = r.p.wait(timeout=30)
    took = time.monotonic() - t0
    err = r.p.stderr.read().decode(errors="replace")
    show("exit", f"{rc} after {took:.1f}s")
    done = os.path.exists(f"{rw}/terminated.txt")
    check("after SIGTERM the running call ends first, then the bridge exits 0", rc == 0 and done and took >= 1.0 and "panicked" not in err, f"rc {rc}, file {done}, {took:.1f}s, {err[-300:]}")
    ran = [x for x in audit(args) if x.get("decision") == "ran" and "terminated.txt" in (x.get("target") or "")]
    check("and brokerd audited it", len(ran) == 1 and ran[0].get("status") == "result", ran)

    print("== raw stdio: the client goes away while the owner is asked")
    r = Raw(args, "review", elicitation=True)
    r.send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "write_file", "arguments": {"path": f"{rw}/gone.txt", "content": "no\n"}}})
    m = r.read()
    check("the server asks through elicitation/create", m is not None and m.get("method") == "elicitation/create", m)
    before = sum(1 for x in audit(args) if x.get("decision") == "declined")
    rc, took, err = r.close()
    after = sum(1 for x in audit(args) if x.get("decision") == "declined")
    check("the ask nobody can answer is declined, nothing written", rc == 0 and after == before + 1 and not os.path.exists(f"{rw}/gone.txt"), f"rc {rc}, declined {before} -> {after}, {err[-300:]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--boxctl", required=True)
    ap.add_argument("--socket", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--audit", required=True)
    args = ap.parse_args()
    t0 = time.monotonic()
    asyncio.run(sdk_checks(args))
    raw_checks(args)
    print(f"{passed} passed, {failed} failed ({time.monotonic() - t0:.1f}s)")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
