"""Adversarial inputs for the redactor: each builds a string of about ``n`` characters
designed to make a careless regex backtrack (keyword followed by a huge run, unterminated
structures, dense repetition of anchors)."""

from __future__ import annotations

from collections.abc import Callable


def _rep(unit: str, n: int) -> str:
    return unit * max(1, n // len(unit))


ADVERSARIAL: dict[str, Callable[[int], str]] = {
    "password= then spaces": lambda n: "password=" + " " * n,
    "password: then spaces then x": lambda n: "password:" + " " * n + "x",
    "run of one letter": lambda n: "a" * n,
    "run of backslashes": lambda n: "\\" * n,
    "run of newlines": lambda n: "\n" * n,
    '"token": " then backslashes': lambda n: '"token": "' + "\\" * n,
    "password=' unterminated": lambda n: "password='" + "a" * n,
    'password=" repeated': lambda n: _rep('password="', n),
    "token= repeated": lambda n: _rep("token=", n),
    "api_key= repeated": lambda n: _rep("api_key=", n),
    "key repeated": lambda n: _rep("key", n),
    "pass repeated": lambda n: _rep("pass", n),
    "secret_key then spaces, repeated": lambda n: _rep("secret_key" + " " * 50, n),
    "x-api-key: then long value": lambda n: "x-api-key: " + "a1" * (n // 2),
    "PEM header unterminated, base64 body": lambda n: "-----BEGIN PRIVATE KEY-----\n" + "A" * n,
    "PEM header repeated": lambda n: _rep("-----BEGIN PRIVATE KEY-----", n),
    "PEM header then spaces": lambda n: "-----BEGIN RSA PRIVATE KEY-----" + " " * n,
    "URL postgres://a:a:a:...": lambda n: "postgres://a" + ":a" * (n // 2),
    "URL :// repeated": lambda n: _rep("://", n),
    "URL ://a: repeated": lambda n: _rep("://a:", n),
    "URL user:@@@@": lambda n: "https://u:" + "@" * n,
    "Bearer repeated": lambda n: _rep("Bearer ", n),
    "Authorization: repeated": lambda n: _rep("Authorization: ", n),
    "Authorization: Bearer then long run": lambda n: "Authorization: Bearer " + "a" * n,
    "eyJ repeated": lambda n: _rep("eyJ", n),
    "eyJ then a.a.a.": lambda n: "eyJ" + "a." * (n // 2),
    "JWT-like with huge segments": lambda n: "eyJ" + "a" * (n // 2) + ".eyJ" + "b" * (n // 2),
    "sk- then long run": lambda n: "sk-" + "a" * n,
    "sk- repeated": lambda n: _rep("sk-", n),
    "ghp_ then long run": lambda n: "ghp_" + "a" * n,
    "digits:AA repeated": lambda n: _rep("1234567890:AA", n),
    "curl -u repeated": lambda n: "curl" + _rep(" -u a:b", n),
    "netrc login repeated": lambda n: "machine x " + _rep("login a ", n),
    "--password repeated": lambda n: _rep("--password ", n),
    "slack webhook then long run": lambda n: "hooks.slack.com/services/" + "A" * n,
    "?sig= repeated": lambda n: _rep("?sig=", n),
    "AccountKey= then long run": lambda n: "AccountKey=" + "A" * n,
    "aws_secret then underscores": lambda n: "aws_secret" + "_" * n,
    "quotes mixed": lambda n: _rep("'\"`", n),
    # the XML element, short-value and newer provider rules
    "XML <password> unterminated": lambda n: "<password>" + "a" * n,
    "XML <apiToken> repeated": lambda n: _rep("<apiToken>", n),
    "XML deeply nested elements": lambda n: _rep("<a>", n // 2) + "x" + _rep("</a>", n // 2),
    "XML password element, huge value": lambda n: "<password>" + "a1" * (n // 2) + "</password>",
    'XML <add key="Password" value= repeated': lambda n: _rep('<add key="Password" value=', n),
    "mysql then -p-p-p": lambda n: "mysql " + "-p" * (n // 2),
    "mysql then ' -p' repeated": lambda n: "mysql" + _rep(" -p", n),
    "sshpass -p repeated": lambda n: _rep("sshpass -p ", n),
    "deeply nested JSON with token keys": lambda n: _rep('{"token": ', n) + '"x"',
    "deeply nested JSON objects": lambda n: _rep('{"a": ', n - n // 7) + "1" + "}" * (n // 7),
    "k8s Secret data block, many entries": lambda n: "kind: Secret\ndata:\n" + _rep("  a: b\n", n),
    "k8s data: with one-line blocks": lambda n: "kind: Secret\n" + _rep("data:\n a\n", n),
    "k8s JSON data without closing brace": lambda n: (
        '{"kind": "Secret", "data": {' + _rep('"a": "b", ', n)
    ),
    "k8s documents repeated": lambda n: _rep("---\nkind: Secret\ndata:\n  a: b\n", n),
    "kind: Secret repeated": lambda n: _rep("kind: Secret ", n),
    "setProperty repeated": lambda n: _rep('System.setProperty("X_TOKEN", ', n),
    "typed Go declaration repeated": lambda n: _rep("var xToken string ", n),
    "Makefile separators repeated": lambda n: _rep("TOKEN ?= :::= ::= ", n),
    "--token= repeated": lambda n: _rep("--token=", n),
    "--with-token repeated": lambda n: _rep("--with-token ", n),
    "setenv TOKEN repeated": lambda n: _rep("setenv TOKEN ", n),
    "A3- repeated": lambda n: _rep("A3-", n),
    ";Password= then a long run": lambda n: ";Password=" + "a " * (n // 2),
    ";Pwd= repeated": lambda n: _rep(";Pwd=", n),
    "token runs just too short": lambda n: _rep("glpat-abcdefghi ", n),
    "one token run of 1 MB with anchors": lambda n: _rep("npm_hf_sk_live_", n),
    "EAAC then long run": lambda n: "EAAC" + "a" * n,
    "ops_eyJ then long run": lambda n: "ops_eyJ" + "A" * n,
    "Azure Q~ repeated in a run": lambda n: _rep("ab18Q~", n),
    "contribsys__com repeated": lambda n: _rep("CONTRIBSYS__COM: ", n),
    # the decoders (each view is built once and scanned once)
    "percent escapes, one line": lambda n: _rep("%41", n),
    "percent escapes of a key, one line": lambda n: _rep("password%3D%22", n),
    "HTML entities, one line": lambda n: _rep("&#61;", n),
    "HTML named entities and ampersands": lambda n: _rep("&quot;&&amp", n),
    "full-width text, one line": lambda n: _rep(
        "".join(chr(ord(c) + 0xFEE0) for c in "password="), n
    ),
    "zero-width spaces between letters": lambda n: _rep("t\u200b", n),
    "base64 blobs of text, repeated": lambda n: _rep("cGFzc3dvcmQ9eHl6eHl6eHl6 ", n),
    "one base64 blob of text": lambda n: "cGFzc3dvcmQ9" + "eHl6" * (n // 4),
    "base64 of binary, repeated": lambda n: _rep("iVBORw0KGgoAAAANSUhEUgAA ", n),
}
