"""Provider tokens: recognised by prefix, alphabet and length, wherever they appear.

No keyword is needed, so a token is caught in env files, JSON, code, curl lines, logs and
prose alike.  Each token runs whole to its end, whatever its length.
"""

from __future__ import annotations

import re

from automemory.services.redactor.base import (
    Rule,
    Validator,
    fake,
    in_url_path,
    is_identifier_words,
    is_placeholder,
    looks_random,
    rx,
)

_EDGE = "A-Za-z0-9_-"


def _token_ok(full_length: int = 0, letters_ok: int = 0) -> Validator:
    """Reject docs placeholders (``ghp_xxxx…``, ``AKIA…EXAMPLE``, ``sk-...``).

    Below ``full_length`` (a shortened token, ``ghp_abc123``), the body must hold a digit
    or an upper-case letter (or be ``letters_ok``+ letters), so ``ghp_token`` or
    ``sk-learn`` stay.
    References are kept: a path segment of a URL (``github.com/xoxa-nyc/…``) unless the
    token is whole or looks generated, a file name (``video_box.ico-7a38….png``), an
    identifier made of words (``hf_requiredCharacteristicTypes…``), a piece of a base64 run.
    """

    def check(m: re.Match[str], value: str, text: str) -> bool:
        body = m.group("body") if "body" in m.re.groupindex else value
        if is_placeholder(value) or is_placeholder(body) or is_identifier_words(body):
            return False
        if len(body) >= 16 and len(set(body)) < 5:
            return False
        start, end = m.span("secret") if "secret" in m.re.groupindex else m.span()
        before = text[start - 2 : start]
        if len(before) == 2 and before[1] in ".+" and before[0].isalnum():
            return False  # video_box.ico-…, …RvfQ+EZAK…: inside a name or a base64 run
        whole = full_length and len(body) >= full_length
        prefixed = "body" in m.re.groupindex  # a webhook URL is a provider format as a whole
        if prefixed and not whole and in_url_path(text, start, end) and not looks_random(body):
            return False
        if full_length and len(body) < full_length:
            return any(c.isdigit() or c.isupper() for c in body) or (
                bool(letters_ok) and len(body) >= letters_ok and body.isalpha()
            )
        return True

    return check


def token(
    rule_id: str,
    label: str,
    anchors: tuple[str, ...],
    prefix: str,
    body: str,
    *,
    true_positives: tuple[str, ...],
    false_positives: tuple[str, ...],
    description: str = "",
    edge: str = _EDGE,
    full_length: int = 0,
    backoff: int = 0,
    long_only: bool = True,
    letters_ok: int = 0,
) -> Rule:
    """A prefixed token: ``prefix`` (case-sensitive regex) then ``body``, bounded by ``edge``.

    ``long_only``: every match is 16+ characters of ``[A-Za-z0-9_.~+/=-]`` (false for the
    formats redacted at any length, ``ghp_abc123``).
    """
    left = edge.replace("=", "")
    pattern = rx(rf"(?<![{left}])(?P<secret>(?:{prefix})(?P<body>{body}))(?![{edge}])")
    return Rule(
        rule_id,
        label,
        description or label,
        anchors,
        pattern,
        _token_ok(full_length, letters_ok),
        true_positives,
        false_positives,
        backoff=backoff,
        backoff_chars="0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_~.",
        in_token_runs=long_only and not full_length,
    )


def _prose(tok: str) -> str:
    return f"the deploy used «{tok}» until yesterday"


B62, HEX = "b62", "hex"

RULES: tuple[Rule, ...] = (
    token(
        "aws-access-key-id",
        "AWS access key ID",
        ("akia", "asia", "abia", "acca", "a3t"),
        r"A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA",
        # AWS issues base32 ([A-Z2-7]); any digit is taken, as a key written by hand or
        # mistyped (AKIA…8…) is still meant as one.
        r"[A-Z0-9]{16}",
        true_positives=(
            "AWS_ACCESS_KEY_ID=«AKIA" + fake("upper", 16) + "»",
            "For testing I used «AKIAZ7QW3ERT5YUI8OPA» with secret",
            _prose("ASIA" + fake("upper", 16, 3)),
            "AWS_ACCESS_KEY_ID=«AKIAIOSFODNN7EXAMPLE»",
        ),
        false_positives=(
            "AWS_ACCESS_KEY_ID=<your-access-key-id>",
            "The Asia-Pacific region is cheaper.",
            "AKIA" + fake("upper", 12),
        ),
    ),
    token(
        "aws-bedrock-key",
        "Amazon Bedrock API key",
        ("absk",),
        r"ABSK",
        r"[A-Za-z0-9+/]{100,}+={0,2}",
        edge="A-Za-z0-9+/=_-",
        true_positives=("AWS_BEARER_TOKEN_BEDROCK=«ABSK" + fake("b64", 132) + "»",),
        false_positives=("ABSK is the prefix of a Bedrock key",),
    ),
    token(
        "github-token",
        "GitHub token",
        ("gh",),
        r"gh[pousr]_",
        r"[A-Za-z0-9]{4,}+",
        full_length=36,
        letters_ok=8,
        description="GitHub tokens of any length: ghp_ (classic PAT), gho_ (OAuth), ghu_ "
        "(user-to-server), ghs_ (server-to-server), ghr_ (refresh)",
        true_positives=(
            "GITHUB_TOKEN=«ghp_" + fake(B62, 36) + "»",
            _prose("gho_" + fake(B62, 36, 5)),
            "token «ghp_abc123» leaked",
            "«gho_Ab3x»",
            "«ghs_" + fake(B62, 850, 2) + "»",
            "«gho_abcdefghijklmnopqrst»",
            "git clone https://«ghp_" + fake(B62, 36, 7) + "»@github.com/o/r.git",
        ),
        false_positives=(
            "GITHUB_TOKEN=ghp_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
            "  - Token: gho_************************************",
            "ghp_token is the variable",
            "gh_pages branch",
            "ghp_abcdef",
            "token: ${{ secrets.GHP_TOKEN }}",
        ),
    ),
    token(
        "cloudflare-origin-ca-key",
        "Cloudflare origin CA key",
        ("v1.0-",),
        r"v1\.0-",
        r"[a-f0-9]{24}-[a-f0-9]{146}",
        description="Cloudflare origin CA key: v1.0- + 24 hex + - + 146 hex",
        true_positives=(
            "CLOUDFLARE_ORIGIN_CA: «v1.0-" + fake(HEX, 24) + "-" + fake(HEX, 146, 1) + "»",
            "<cloudflareToken>\n    «v1.0-" + fake(HEX, 24, 2) + "-" + fake(HEX, 146, 3) + "»\n"
            "</cloudflareToken>",
        ),
        false_positives=("api/v1.0-beta/users", "release v1.0-" + fake(HEX, 24)),
    ),
    token(
        "github-fine-grained-pat",
        "GitHub fine-grained token",
        ("github_pat_",),
        r"github_pat_",
        r"[A-Za-z0-9_]{20,}+",
        true_positives=("«github_pat_" + fake(B62, 22) + "_" + fake(B62, 59, 4) + "»",),
        false_positives=("github_pat_ tokens expire", "GITHUB_PAT_NAME=ci"),
    ),
    token(
        "gitlab-token",
        "GitLab token",
        ("gl", "gr1348941"),
        r"(?:glpat|gldt|glrt|glptt|glft|glsoat|glcbt|glffct|glimt|glagent|gloas|glwt)-"
        r"|GR1348941",
        r"[A-Za-z0-9_.-]{20,}+",
        description="GitLab tokens: glpat- (personal), gldt- (deploy), glrt- (runner), glptt- "
        "(trigger), glft- (feed), glsoat-, glcbt-, glffct-, glimt-, glagent-, gloas-, glwt-, "
        "GR1348941 runner registration",
        true_positives=(
            "GITLAB_TOKEN=«glpat-" + fake(B62, 20) + "»",
            _prose("glrt-" + fake(B62, 24, 2)),
            "«GR1348941" + fake(B62, 20, 3) + "»",
        ),
        false_positives=(
            "glpat- is the prefix",
            "global-settings-file",
            "glpat-xxxxxxxxxxxxxxxxxxxx",
        ),
    ),
    token(
        "slack-token",
        "Slack token",
        ("xox", "xapp-"),
        r"xox[a-z]-|xoxe\.xox[a-z]-|xapp-",
        r"[A-Za-z0-9-]{3,}+",
        long_only=False,
        description="Slack tokens of any length: xoxb-, xoxp-, xoxa-, xoxr-, xoxs-, xoxe-, "
        "xoxe.xoxp-, xapp-",
        true_positives=(
            "SLACK_BOT_TOKEN=«xoxb-123456789012-1234567890123-" + fake(B62, 24) + "»",
            "«xoxb-abc»",
            _prose("xapp-1-A0123456789-1234567890123-" + fake(HEX, 64)),
        ),
        false_positives=(
            "xoxb-your-token",
            "SLACK_BOT_TOKEN=xoxb-...",
            "xoxb- tokens",
            "https://github.com/xoxa-nyc/xoxa-nyc.github.io/blob/master/README.md",
            "see https://example.com/docs/xoxb-tokens/rotation",
        ),
    ),
    Rule(
        "slack-webhook",
        "Slack webhook URL",
        "Slack incoming webhook / workflow URL",
        ("hooks.slack.com/",),
        rx(r"hooks\.slack\.com/(?:services|workflows|triggers)/(?P<secret>[A-Za-z0-9+/_-]{20,}+)"),
        _token_ok(),
        ("https://hooks.slack.com/services/«T0123ABCD/B0123ABCD/" + fake(B62, 24) + "»",),
        ("https://hooks.slack.com/services/T000/B000/XXXXXXXXXXXXXXXXXXXXXXXX",),
        in_token_runs=True,
    ),
    Rule(
        "discord-webhook",
        "Discord webhook URL",
        "Discord webhook URL",
        ("/api/webhooks/",),
        rx(r"/api/webhooks/[0-9]{17,20}/(?P<secret>[A-Za-z0-9_-]{60,}+)"),
        _token_ok(),
        ("https://discord.com/api/webhooks/123456789012345678/«" + fake(B62, 68) + "»",),
        ("https://discord.com/api/webhooks/{id}/{token}",),
        in_token_runs=True,
    ),
    Rule(
        "teams-webhook",
        "Microsoft Teams webhook URL",
        "Microsoft Teams incoming webhook URL (webhook.office.com/webhookb2/...)",
        ("webhook.office.com/webhookb2/",),
        rx(r"webhook\.office\.com/webhookb2/(?P<secret>[A-Za-z0-9@/_.-]{40,}+)"),
        _token_ok(),
        (
            "https://acme.webhook.office.com/webhookb2/«"
            + fake(HEX, 8)
            + "-1234-4abc-8def-"
            + fake(HEX, 12)
            + "@"
            + fake(HEX, 8, 1)
            + "/IncomingWebhook/"
            + fake(HEX, 32)
            + "»",
        ),
        ("Create an incoming webhook at webhook.office.com/webhookb2/ in Teams.",),
    ),
    token(
        "anthropic-key",
        "Anthropic API key",
        ("sk-",),
        r"sk-ant-",
        r"[A-Za-z0-9_-]{32,}+",
        description="Anthropic API / admin keys sk-ant-api03-, sk-ant-admin01-",
        true_positives=("ANTHROPIC_API_KEY=«sk-ant-api03-" + fake(B62, 93) + "AA»",),
        false_positives=("ANTHROPIC_API_KEY=sk-ant-xxxxxxxx",),
    ),
    token(
        "openai-key",
        "OpenAI-style API key",
        ("sk-",),
        r"sk-(?!ssh-|ecdsa-)",
        r"[A-Za-z0-9_-]{3,}+",
        full_length=20,
        description="sk- keys of any length (OpenAI sk-, sk-proj-, sk-svcacct-, sk-admin-; "
        "DeepSeek, OpenRouter sk-or-); a short one needs a digit or a capital",
        true_positives=(
            "OPENAI_API_KEY=«sk-proj-" + fake(B62, 156) + "»",
            "key «sk-abc123» leaked",
            "«sk-svcacct-" + fake(B62, 120, 3) + "»",
        ),
        false_positives=(
            "scikit-learn==1.5.0  sk-learn alias",
            '_SK_SSH_ED25519 = b"sk-ssh-ed25519@openssh.com"',
            "OPENAI_API_KEY=sk-...",
            "risk-free",
        ),
    ),
    token(
        "google-api-key",
        "Google API key",
        ("aiza", "gocspx-", "ya29."),
        r"AIza|GOCSPX-|ya29\.",
        r"[A-Za-z0-9_-]{20,}+",
        description="Google API key AIza..., OAuth client secret GOCSPX-, OAuth access token ya29.",
        true_positives=(
            "GOOGLE_API_KEY=«AIza" + fake(B62, 35) + "»",
            '"client_secret": "«GOCSPX-' + fake(B62, 28) + '»"',
            _prose("ya29." + fake(B62, 120, 2)),
        ),
        false_positives=("AIzaSy... (truncated)", "ya29.xxxxxxxxxxxxxxxxxxxxxxxx"),
    ),
    token(
        "azure-ad-client-secret",
        "Azure AD client secret",
        ("q~",),
        r"[A-Za-z0-9_~.]{3}[0-9]Q~",
        r"[A-Za-z0-9_~.-]{31,34}",
        edge="A-Za-z0-9_~.-",
        backoff=4,
        true_positives=('AZURE_CLIENT_SECRET="«ab1' + "8Q~" + fake(B62, 34) + '»"',),
        false_positives=("the Q~ sign", "x8Q~short"),
    ),
    token(
        "stripe-key",
        "Stripe secret key",
        ("sk_", "rk_", "whsec_"),
        r"[sr]k_(?:live|test|prod)_|whsec_",
        r"[A-Za-z0-9]{16,}+",
        description="Stripe secret and restricted keys sk_live_, sk_test_, rk_live_, rk_test_, "
        "webhook secret whsec_",
        true_positives=(
            "STRIPE_SECRET_KEY=«sk_live_" + fake(B62, 24) + "»",
            _prose("whsec_" + fake(B62, 32, 1)),
        ),
        false_positives=("pk_live_" + fake(B62, 24), "sk_live_xxxxxxxxxxxxxxxxxxxxxxxx"),
    ),
    token(
        "sendgrid-key",
        "SendGrid API key",
        ("sg.",),
        r"SG\.",
        r"[A-Za-z0-9_-]{16,32}\.[A-Za-z0-9_-]{30,64}",
        true_positives=("SENDGRID_API_KEY=«SG." + fake(B62, 22) + "." + fake(B62, 43, 2) + "»",),
        false_positives=("SG.example.com", "msg.reply_to"),
    ),
    token(
        "twilio-key",
        "Twilio API key",
        ("sk",),
        r"SK",
        r"[0-9a-fA-F]{32}",
        true_positives=("TWILIO_API_KEY=«SK" + fake(HEX, 32) + "»",),
        false_positives=("SKU " + fake(HEX, 32), "SK" + fake(HEX, 30)),
    ),
    token(
        "npm-token",
        "npm token",
        ("npm_",),
        r"npm_",
        r"[A-Za-z0-9]{36,}+",
        true_positives=("//registry.npmjs.org/:_authToken=«npm_" + fake(B62, 36) + "»",),
        false_positives=("npm_config_cache=/tmp/npm", "npm_package_version"),
    ),
    token(
        "pypi-token",
        "PyPI token",
        ("pypi-age",),
        r"pypi-AgE",
        r"[A-Za-z0-9_-]{50,}+",
        true_positives=("password = «pypi-AgEIcHlwaS5vcmc" + fake(B62, 70) + "»",),
        false_positives=("pypi-AgE is how upload tokens start",),
    ),
    token(
        "huggingface-token",
        "Hugging Face token",
        ("hf_", "api_org_"),
        r"hf_|api_org_",
        r"[A-Za-z0-9]{30,}+",
        true_positives=(
            "HF_TOKEN=«hf_" + fake(B62, 34) + "»",
            "login(token='«hf_" + fake(B62, 34, 2) + "»')",
        ),
        false_positives=(
            "hf_hub_download(repo_id)",
            "api_org_name",
            "- (id)hf_requiredCharacteristicTypesForDisplayMetadata;",
            "self.hf_DownloadProgressCallbackHandler = None",
        ),
    ),
    token(
        "digitalocean-token",
        "DigitalOcean token",
        ("dop_", "doo_", "dor_"),
        r"do[por]_v1_",
        r"[a-f0-9]{64}",
        true_positives=("DIGITALOCEAN_TOKEN=«dop_v1_" + fake(HEX, 64) + "»",),
        false_positives=("dop_v1_ prefix",),
    ),
    token(
        "shopify-token",
        "Shopify token",
        ("shp",),
        r"shp(?:at|ca|pa|ss)_",
        r"[a-fA-F0-9]{32}",
        true_positives=("SHOPIFY_TOKEN=«shpat_" + fake(HEX, 32) + "»",),
        false_positives=("shpat_ tokens",),
    ),
    token(
        "doppler-token",
        "Doppler token",
        ("dp.",),
        r"dp\.(?:pt|st|sa|ct|scim|audit)\.",
        r"[A-Za-z0-9._-]{40,}+",
        true_positives=("DOPPLER_TOKEN=«dp.pt." + fake(B62, 43) + "»",),
        false_positives=("dp.pt.settings",),
    ),
    token(
        "vault-token",
        "HashiCorp Vault or Terraform token",
        ("hv", ".atlasv1."),
        r"hv[sbr]\.|[A-Za-z0-9]{14}\.atlasv1\.",
        r"[A-Za-z0-9_=-]{24,}+",
        description="HashiCorp Vault tokens hvs., hvb., hvr.; Terraform Cloud .atlasv1.",
        true_positives=("VAULT_TOKEN=«hvs." + fake(B62, 90) + "»",),
        false_positives=("hvs.example", "hvs.xxxxxxxxxxxxxxxxxxxxxxxxxxxx"),
    ),
    token(
        "age-secret-key",
        "age secret key",
        ("age-secret-key-1",),
        r"AGE-SECRET-KEY-1",
        r"[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}",
        true_positives=("«AGE-SECRET-KEY-1" + ("QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L" * 2)[:58] + "»",),
        false_positives=(
            "# public key: age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p",
        ),
    ),
    token(
        "databricks-token",
        "Databricks token",
        ("dapi",),
        r"dapi",
        r"[a-f0-9]{32}(?:-[0-9])?",
        true_positives=("DATABRICKS_TOKEN=«dapi" + fake(HEX, 32) + "»",),
        false_positives=("dapi_version = 2",),
    ),
    token(
        "mailgun-key",
        "Mailgun API key",
        ("key-",),
        r"key-",
        r"[0-9a-f]{32}",
        true_positives=("MAILGUN_API_KEY=«key-" + fake(HEX, 32) + "»",),
        false_positives=("key-value store",),
    ),
    Rule(
        "telegram-bot-token",
        "Telegram bot token",
        "Telegram bot token <bot id>:AA<33 chars> (found at :AA, then backs up over the id)",
        (":aa",),
        rx(r"(?<![0-9])(?P<secret>[0-9]{8,10}:(?P<body>AA[A-Za-z0-9_-]{33}))(?![A-Za-z0-9_-])"),
        _token_ok(),
        ("TELEGRAM_BOT_TOKEN=«1234567890:AA" + fake(B62, 33) + "»",),
        ("12:AAPL price", "1234567890:AAxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"),
        backoff=10,
    ),
    token(
        "sourcegraph-token",
        "Sourcegraph token",
        ("sgp_",),
        r"sgp_(?:[a-fA-F0-9]{16}_|local_)?",
        r"[a-fA-F0-9]{40}",
        true_positives=(
            "SRC_ACCESS_TOKEN=«sgp_" + fake(HEX, 16) + "_" + fake(HEX, 40, 2) + "»",
            _prose("sgp_" + fake(HEX, 40)),
        ),
        false_positives=("sgp_ is the Sourcegraph prefix",),
    ),
    token(
        "facebook-access-token",
        "Facebook access token",
        ("eaa",),
        r"EAA[A-Z]",
        r"[A-Za-z0-9]{80,}+",
        true_positives=("FB_PAGE_TOKEN=«EAAC" + fake(B62, 180) + "»",),
        false_positives=("EAAC" + fake("lower", 20), "EAAS is not a token"),
    ),
    token(
        "onepassword-secret-key",
        "1Password secret key",
        ("a3-",),
        r"A3-",
        r"[A-Z0-9]{6}-(?:[A-Z0-9]{11}|[A-Z0-9]{6}-[A-Z0-9]{5})-[A-Z0-9]{5}-[A-Z0-9]{5}-[A-Z0-9]{5}",
        true_positives=(
            "«A3-" + "-".join(fake("upper", n, i) for i, n in enumerate((6, 6, 5, 5, 5, 5))) + "»",
            "Secret Key: «A3-"
            + "-".join(fake("upper", n, i) for i, n in enumerate((6, 11, 5, 5, 5)))
            + "»",
        ),
        false_positives=("A3-XXXXXX-XXXXXXXXXXX-XXXXX-XXXXX-XXXXX", "paper size A3-landscape"),
    ),
    token(
        "onepassword-service-account-token",
        "1Password service account token",
        ("ops_eyj",),
        r"ops_eyJ",
        r"[A-Za-z0-9+/]{100,}+={0,3}",
        edge="A-Za-z0-9+/=_-",
        true_positives=("OP_SERVICE_ACCOUNT_TOKEN=«ops_eyJ" + fake("b64", 260) + "»",),
        false_positives=("ops_eyJ is how service account tokens start",),
    ),
    Rule(
        "sidekiq-credentials",
        "Sidekiq Enterprise credentials",
        "Sidekiq Pro/Enterprise gem source credentials: BUNDLE_ENTERPRISE__CONTRIBSYS__COM "
        "/ BUNDLE_GEMS__CONTRIBSYS__COM = user:password",
        ("contribsys__com",),
        rx(
            r"""contribsys__com\\?["']?[ \t]{0,4}(?:=|:)[ \t]{0,4}\\?["']?
            (?P<secret>[A-Za-z0-9_.-]{1,64}+:[^\s"'`@]{1,}+)""",
            re.IGNORECASE,
        ),
        None,
        (
            "BUNDLE_ENTERPRISE__CONTRIBSYS__COM: «" + fake(HEX, 8) + ":" + fake(HEX, 8, 1) + "»",
            'export BUNDLE_GEMS__CONTRIBSYS__COM="«' + fake(HEX, 8) + ":" + fake(HEX, 8, 2) + '»"',
        ),
        ("BUNDLE_ENTERPRISE__CONTRIBSYS__COM: ${SIDEKIQ_CREDS}",),
    ),
    token(
        "heroku-key",
        "Heroku API key",
        ("hrku-",),
        r"HRKU-",
        r"AA[A-Za-z0-9_-]{58}",
        true_positives=("HEROKU_API_KEY=«HRKU-AA" + fake(B62, 58) + "»",),
        false_positives=("HRKU-AA prefix",),
    ),
)
