"""The disguised part of the labelled corpus: secrets in disguise and the redaction residue.

Positives: every form the decoders see through (full-width, invisible characters inside
a token, percent-encoding, HTML entities, base64 text), each with several secrets and
contexts; the two minimum forms (the GitHub/Slack tokens and secret-named
key=value pairs every build must catch) that passed (a real-shaped key ending in EXAMPLEKEY,
short ``gho_`` tokens); the scanner forms that were missed (multi-line XML elements,
``const``/Makefile assignments of provider-named keys, curl ``-u`` variants, Cloudflare
origin CA keys).  Negatives: the reference forms behind the five damages (URL path
segments, file names, identifiers, ``$VAR``/``${VAR}``/``$1``, backticks and ``$(...)``,
``${{ secrets.X }}``) and look-alikes of every decoder (text that decodes to nothing
secret).  Written by hand around generated values; none is a real credential.
"""

from __future__ import annotations

import base64
from urllib.parse import quote

from tests.automemory.redactor.corpus import B62, HEX, Sample, _Gen


def _wide(s: str) -> str:
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in s)


def _pct(s: str) -> str:
    return quote(s, safe="")


def _entities(s: str) -> str:
    return "".join(f"&#{ord(c)};" if c in "=:\"'@/" else c for c in s)


def _b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


def _positives(g: _Gen) -> list[Sample]:
    out: list[Sample] = []
    for i in range(6):
        tok = "ghp_" + g.chars(B62, 36)
        pw = g.password()
        key = g.chars(B62, 32)
        url = f"postgres://app:{pw}@db{i}.internal:5432/app"
        # full-width and invisible characters
        out.append(
            Sample("disguise:wide", "prose", f"push with {_wide(tok)} today", (_wide(tok)[6:],))
        )
        out.append(Sample("disguise:wide", "env", _wide(f"API_TOKEN={key}"), (_wide(key),)))
        cut = 5 + i * 4
        split = tok[:cut] + "\u200b" + tok[cut:]
        out.append(Sample("disguise:zwsp", "env", f"GITHUB_TOKEN={split}", (tok[cut:],)))
        soft = f"sk-proj-{key[:10]}\u00ad{key[10:]}"
        out.append(
            Sample(
                "disguise:soft-hyphen", "code", f'client = OpenAI(api_key="{soft}")', (key[10:],)
            )
        )
        joined = f"pass\u2060word={pw}"
        out.append(Sample("disguise:word-joiner", "env", joined, (pw,)))
        # percent-encoding
        out.append(Sample("disguise:percent", "env", f"DATABASE_URL={_pct(url)}", (_pct(pw),)))
        out.append(
            Sample("disguise:percent", "log", f"GET /cb?next={_pct('/x?token=' + key)} 302", (key,))
        )
        # HTML entities
        out.append(Sample("disguise:html", "prose", f"<p>password&#61;{pw}</p>", (pw,)))
        out.append(Sample("disguise:html", "json", _entities(f'"api_key": "{key}"'), (key,)))
        # base64 text
        blob = _b64(f"export DATABASE_URL={url}")
        out.append(Sample("disguise:base64", "env", f"DB_BOOTSTRAP={blob}", (blob,)))
        blob = _b64(f"token: {key}\n")
        out.append(Sample("disguise:base64", "yaml", f"  config.yaml: {blob}", (blob,)))
    # the two minimum forms and the scanner forms that were missed
    for i in range(4):
        aws = g.chars(B62 + "/+", 30) + "EXAMPLEKEY"
        out.append(Sample("residue:aws-example", "env", f"aws_secret_access_key={aws}", (aws,)))
        gho = "gho_" + g.chars("abcdefghijklmnopqrstuvwxyz", 12 + i * 4)
        out.append(Sample("residue:gho-short", "prose", f"the app got {gho} back", (gho,)))
        val = g.chars(B62, 40)
        out.append(
            Sample(
                "residue:xml-multiline", "xml", f"<sonarToken>\n    {val}\n</sonarToken>", (val,)
            )
        )
        out.append(Sample("residue:sonar", "js", f'const SONAR_LOGIN = "{val}"', (val,)))
        out.append(Sample("residue:sonar", "makefile", f'SONAR_LOGIN := "{val}"', (val,)))
        uuid = "-".join(g.chars(HEX, n) for n in (8, 4, 4, 4, 12))
        out.append(Sample("residue:snyk", "js", f'const SNYK_KEY = "{uuid}"', (uuid,)))
        sumo = "su" + g.chars(B62, 12)
        out.append(Sample("residue:sumo", "python", f'sumologic_access_id = "{sumo}"', (sumo,)))
        ca = "v1.0-" + g.chars(HEX, 24) + "-" + g.chars(HEX, 146)
        out.append(Sample("residue:cloudflare-ca", "yaml", f"CLOUDFLARE_ORIGIN_CA: {ca}", (ca,)))
        pw = g.chars(B62, 16)
        out.append(
            Sample("residue:curl", "curl", f"curl -k https://h/api \\\n  -u deploy:{pw}", (pw,))
        )
        out.append(Sample("residue:curl", "curl", f'curl -u ":{pw}" https://h:9200', (pw,)))
        out.append(Sample("residue:curl", "curl", f"curl --user ci:'{pw}' https://h", (pw,)))
    return out


_NEGATIVES = (
    # URL path segments and file names
    "https://github.com/xoxa-nyc/xoxa-nyc.github.io/blob/master/README.md",
    "https://github.com/xoxb-labs/xoxb-labs.github.io/tree/main/docs",
    "http://assets.example.com/media_box/video_box.ico-7a388b69018576d24b59331fd60aab0c.png",
    "<link rel=icon href=/static/favicon.ico-3f2a9c1e7b4d4e8a9c2f1a6b8d0e4f7c.png>",
    # identifiers
    "- (id)hf_requiredCharacteristicTypesForDisplayMetadata;",
    "@property (nonatomic) id hf_PreferredDisplayModeObserver;",
    # shell references
    'curl -sL --user "$1:$2" "$3" > "$4"',
    'curl -u "${USER}:${PASS}" https://h',
    "curl -u $CI_USER:$CI_TOKEN https://h",
    "SUMO_ACCESS_KEY=`etcdctl get /sumologic_secret`",
    "-e SUMO_ACCESS_KEY=`etcdctl get /sumologic_secret`",
    "API_TOKEN=$(vault read -field=token secret/ci)",
    "export GITHUB_TOKEN=${GITHUB_TOKEN:-}",
    "password: ${{ secrets.DB_PASSWORD }}",
    'curl -u "${{ secrets.API_USER }}:${{ secrets.API_PASSWORD }}" https://h',
    "aws_secret_access_key = ${{ secrets.AWS_SECRET_ACCESS_KEY }}",
    # provider names in keys with values that are not of the provider's shape
    "SONAR_LOGIN=admin",
    'SNYK_ORG_ID = "3f2a9c1e-7b4d-4e8a-9c2f-1a6b8d0e4f7c"',
    "sumObj = suGyI5imvADdvU",
    # decoder look-alikes
    "https://example.com/search?q=caf%C3%A9%20au%20lait&page=2",
    'printf("%02d:%02d\\n", h, m);',
    "<p>Tom &amp; Jerry &lt;3 &copy; 2024</p>",
    "a &#61; b &#43; c",
    "\u30d1\u30b9\u30ef\u30fc\u30c9\u3092\u5909\u66f4\u3057\u307e\u3057\u305f",
    "\u00abcaf\u00e9\u00bb \ufb01le x\u00b2",
    "\U0001f469\u200d\U0001f4bb deployed the fix",
    "integrity: sha512-" + _b64("x" * 48),
    "config: " + _b64('{"replicas": 3, "image": "app:1.4.2"}'),
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==",
)


# The disguised part's seed suffix: a generator of its own, so the other parts' samples do
# not depend on it.
SEED_SUFFIX = "-disguised"


def build_disguised_corpus(seed: str = "automemory-redactor-corpus-v1") -> list[Sample]:
    """Secrets in disguise and the residue forms, with their reference-form and decoder
    look-alike negatives; deterministic for ``seed``."""
    g = _Gen(seed + SEED_SUFFIX)
    return _positives(g) + [Sample("neg:disguise-lookalike", "negative", t) for t in _NEGATIVES]
