"""What a secret looks like: the masker's patterns, compiled with RE2.

RE2 matches in time linear in the input whatever the pattern (no backtracking), so a
crafted message cannot stall the event loop the way a backtracking `re` pattern could.
The formats follow detect-secrets' plugins (AWS, Azure storage, GitHub, GitLab, Slack,
Stripe, Twilio, SendGrid, npm, PyPI, private keys, JWT, basic auth in URLs, keywords),
plus what Kubernetes shows: kubeconfig `client-key-data`, docker `auths`, Secret data.

Each rule is (kind, pattern). The masker replaces the first capture group that took part
in the match, or the whole match when the pattern has no group: a rule keeps the key
(`password=`) visible and masks the value.
"""

from __future__ import annotations

import re2

_OPTIONS = re2.Options()
_OPTIONS.max_mem = 64 << 20  # patterns are fixed; this only bounds one compiled program


def _compile(pattern: str) -> re2._Regexp:
    return re2.compile(pattern, _OPTIONS)


# A value after `key=` / `key: `: double- or single-quoted (spaces allowed, one line), or
# a bare word up to whitespace, a quote or a separator. Quotes may be escaped any number
# of times (JSON inside a JSON string inside a log line: \\"password\\": \\"x\\"); a bare
# value stops at an escape (`\n`) so it never runs into the next escaped line.
_VALUE = (
    r"""(?:\\*"([^"\n]+?)\\*"|\\*'([^'\n]+?)\\*'|"""
    r"""([^\s"',;&\\]{2,}(?:\\[^\s"',;&\\nrt][^\s"',;&\\]*)*))"""
)
_SEPARATOR = r"""(?:\\*["'])?[ \t]*[=:][ \t]*"""

# Env-var style names (upper case) that say they hold a secret: DB_PASSWORD, API_KEY…
_SECRET_NAME = r"[A-Z0-9_]*(?:SECRET|TOKEN|PASSWORD|PASSWD|KEY|CREDENTIAL)[A-Z0-9_]*"
# Config keys in any case that hold credentials, possibly with a prefix
# (aws_secret_access_key, db.password, clientSecret, client-key-data…). A bare "key" is not.
_CREDENTIAL_KEY = (
    r"(?:password|passwd|passphrase|pwd|pass|token|secret|api[_-]?key|apikey|access[_-]?key|"
    r"secret[_-]?key|client[_-]?secret|private[_-]?key|private[_-]?key[_-]?id|auth|"
    r"auth[_-]?token|access[_-]?token|refresh[_-]?token|credentials?|client-key-data|"
    r"\.?dockerconfigjson|\.?dockercfg|connection[_-]?string|sas[_-]?token|account[_-]?key)"
)
# base64 of "-----BEGIN (RSA |EC |DSA |OPENSSH |ENCRYPTED )PRIVATE KEY" (kubeconfig
# client-key-data, a Secret's tls.key) and of a docker config `{"auths":` (.dockerconfigjson).
_B64_PRIVATE_KEY = (
    r"LS0tLS1CRUdJTi(?:BQUklWQVRF|BSU0EgUFJJVkFUR|BFQyBQUklWQVRF|BEU0EgUFJJVkFUR|"
    r"BPUEVOU1NIIFBSSVZBVEU|BFTkNSWVBURUQgUFJJVkFURS)[A-Za-z0-9+/=]*"
)

RULES: list[tuple[str, re2._Regexp]] = [
    (
        "private_key",
        # Up to the END line, or to the end of the text when it was cut off.
        _compile(
            r"-----BEGIN [A-Z ]{0,40}PRIVATE KEY(?: BLOCK)?-----[\s\S]*?"
            r"(?:-----END [A-Z ]{0,40}PRIVATE KEY(?: BLOCK)?-----|$)"
        ),
    ),
    ("private_key", _compile(_B64_PRIVATE_KEY)),
    ("docker_config", _compile(r"(?:eyJhdXRocyI6|ewogICJhdXRocyI6|ewoJImF1dGhzIj)[A-Za-z0-9+/=]+")),
    ("bearer_token", _compile(r"(?i)\bbearer[ \t]+([A-Za-z0-9\-._~+/]{8,}=*)")),
    ("basic_auth", _compile(r"(?i)\bbasic[ \t]+([A-Za-z0-9+/]{8,}={0,2})")),
    (
        "authorization",
        _compile(r"(?i)\bauthorization" + _SEPARATOR + r"(?:token[ \t]+)?([^\s\"',]{8,})"),
    ),
    ("jwt", _compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")),
    ("aws_access_key", _compile(r"\b(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[0-9A-Z]{16}\b")),
    ("gcp_api_key", _compile(r"\bAIza[0-9A-Za-z_-]{35}")),
    ("gcp_oauth_token", _compile(r"\bya29\.[0-9A-Za-z_-]{20,}")),
    ("gcp_client_secret", _compile(r"\bGOCSPX-[0-9A-Za-z_-]{20,}")),
    (
        "azure_key",
        _compile(r"(?i)\b(?:AccountKey|SharedAccessKey|SharedAccessSignature)=([^;\s\"']{8,})"),
    ),
    ("azure_sas", _compile(r"[?&]sig=([A-Za-z0-9%+/=]{16,})")),
    ("azure_client_secret", _compile(r"\b[A-Za-z0-9_~.]{3}\dQ~[A-Za-z0-9_~.-]{31,34}")),
    (
        "slack_webhook",
        _compile(r"hooks\.slack\.com/(?:services|workflows|triggers)/([A-Za-z0-9_/-]{8,})"),
    ),
    ("slack_token", _compile(r"\bx(?:ox[abposre]|app)-[A-Za-z0-9-]{8,}")),
    ("stripe_key", _compile(r"\b(?:sk|rk|pk)_(?:live|test)_[0-9A-Za-z]{10,}")),
    ("stripe_webhook_secret", _compile(r"\bwhsec_[0-9A-Za-z]{20,}")),
    ("api_key", _compile(r"\b(?:sk|rk|pk)-[A-Za-z0-9_-]{16,}")),  # OpenAI, Anthropic, …
    ("github_token", _compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}")),
    ("github_token", _compile(r"\bgithub_pat_[A-Za-z0-9_]{22,}")),
    (
        "gitlab_token",
        _compile(r"\bgl(?:pat|dt|ptt|rt|soat|ft|imt|agent|oas|cbt|ffct)-[0-9A-Za-z_-]{20,}"),
    ),
    ("gitlab_token", _compile(r"\bGR1348941[0-9A-Za-z_-]{20,}")),
    ("twilio_key", _compile(r"\b(?:SK|AC)[0-9a-fA-F]{32}\b")),
    ("sendgrid_key", _compile(r"\bSG\.[0-9A-Za-z_-]{16,32}\.[0-9A-Za-z_-]{16,64}")),
    ("npm_token", _compile(r"\bnpm_[A-Za-z0-9]{36}")),
    ("pypi_token", _compile(r"\bpypi-AgE[A-Za-z0-9_-]{50,}")),
    ("mailgun_key", _compile(r"\bkey-[0-9a-zA-Z]{32}\b")),
    ("telegram_bot_token", _compile(r"\b\d{8,10}:AA[0-9A-Za-z_-]{33}\b")),
    ("discord_webhook", _compile(r"discord(?:app)?\.com/api/webhooks/(\d+/[A-Za-z0-9_-]{20,})")),
    # Kubernetes env entries as JSON or a Python repr: {"name": "DB_PASSWORD", "value": "..."}
    (
        "secret_env",
        _compile(
            r"""["']name["'][ \t]*:[ \t]*["']"""
            + _SECRET_NAME
            + r"""["'][ \t]*,[ \t]*["']value["'][ \t]*:[ \t]*["']([^"'\n]+)["']"""
        ),
    ),
    # The same as YAML:  - name: DB_PASSWORD\n    value: hunter2
    (
        "secret_env",
        _compile(
            r"\bname:[ \t]*[\"']?" + _SECRET_NAME + r"[\"']?[ \t]*\n[ \t]*value:[ \t]*" + _VALUE
        ),
    ),
    # Connection strings: Server=db;User Id=sa;Password=two words;
    ("connection_string", _compile(r"(?i)\b(?:password|pwd)[ \t]*=[ \t]*([^;\"'\n]+);")),
    # NAME=value / NAME: value / "NAME": "value" where the name says it is a secret.
    ("secret_pair", _compile(r"\b" + _SECRET_NAME + _SEPARATOR + _VALUE)),
    ("credential_pair", _compile(r"(?i)" + _CREDENTIAL_KEY + _SEPARATOR + _VALUE)),
    # scheme://user:password@host (database URLs, git remotes, proxies). A password may hold
    # `/` and `@` (people paste them unencoded): it runs to the token's last `@`. It starts
    # with neither `/` (`https://a<https://b|x><@U1>`: a second URL, not a password) nor a
    # port (`host:443/@types/node`).
    (
        "url_password",
        _compile(
            r"""\b[a-zA-Z][a-zA-Z0-9+.-]{0,30}://[^/\s:@"']*:"""
            r"""((?:[0-9]*)[^\s"'0-9/@][^\s"']*)@[^\s@"'/]"""
        ),
    ),
    # mysql -pPASSWORD (and mysqldump, mysqladmin): the password glued to -p.
    ("mysql_password", _compile(r"\bmysql(?:dump|admin|import|sh)?\b[^\n]*?[ \t]-p([^\s\"']+)")),
    # Prose: "the password is hunter2", "secret was: x", "token is now abc".
    (
        "prose_secret",
        _compile(
            r"(?i)\b(?:password|passwd|passphrase|secret|token|api[ _-]?key)[ \t]+"
            r"(?:is|was)\b(?:[ \t]+now\b)?[ \t]*:?[ \t]*[\"'`]?([^\s\"'`,;]{3,})"
        ),
    ),
]

# A Secret's `data` / `stringData` map, as JSON or YAML: every value in it is masked.
SECRET_DATA_JSON = _compile(r"""["'](?:data|stringData)["'][ \t]*:[ \t]*\{([^{}]*)\}""")
SECRET_DATA_JSON_VALUE = _compile(r"""(["'][^"'\n]+["'][ \t]*:[ \t]*["'])([^"'\n]*)(["'])""")
SECRET_DATA_YAML = _compile(r"(?m)^([ \t]*)(?:data|stringData):[ \t]*$")
YAML_ENTRY = _compile(r"^([ \t]+[^:\s]+:[ \t]*)(\S.*)$")


def _any_of(patterns: list[re2._Regexp]) -> re2._Regexp:
    """One pattern that matches wherever any of `patterns` does: a text it finds nothing in
    needs none of the rules' passes (most texts: one scan instead of one per rule)."""
    parts = []
    for pattern in patterns:
        source = pattern.pattern
        # A leading inline flag applies to the whole pattern; scoped, it keeps doing so.
        parts.append(f"(?i:{source[4:]})" if source.startswith("(?i)") else f"(?:{source})")
    return _compile("|".join(parts))


# Matches a text iff at least one rule of RULES does.
ANY_RULE = _any_of([pattern for _, pattern in RULES])
