"""Secrets in the formats kelpie must never let out: (name, text as it appears, the secret).

Every value is made up, in the shape of the real format. The exit tests push these through
the model request, Slack posts and uploads, logs, hooks and the database.
"""

from __future__ import annotations

import base64

_B64_KEY = base64.b64encode(
    b"-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEAzq9Xg7QkV0r1uvFakeKeyMaterial\n"
    b"-----END RSA PRIVATE KEY-----\n"
).decode()
_DOCKER_JSON = '{"auths":{"registry.example.com":{"auth":"ZGVwbG95OnMzY3IzdFB1bGw="}}}'
_DOCKER_B64 = base64.b64encode(_DOCKER_JSON.encode()).decode()
_JWT = (
    "eyJhbGciOiJSUzI1NiIsImtpZCI6IkFCQyJ9.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6ZGVmYXVsdCJ9"
    ".c2lnbmF0dXJlLXRoYXQtaXMtbG9uZy1lbm91Z2gtdG8tbG9vay1yZWFs"
)
_PEM = (
    "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7\n"
    "Zm9vYmFyYmF6cXV4UHJpdmF0ZUtleU1hdGVyaWFs\n-----END PRIVATE KEY-----"
)

SECRETS: list[tuple[str, str, str]] = [
    ("aws access key", "AWS_ACCESS_KEY_ID: AKIAIOSFODNN7EXAMPL3", "AKIAIOSFODNN7EXAMPL3"),
    (
        "aws secret key",
        "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    ),
    (
        "aws sts json",
        '{"AccessKeyId": "ASIAXYZXYZXYZXYZXYZ1", "SecretAccessKey": "Zk9vQmFyQmF6UXV4MTIz/x+y"}',
        "Zk9vQmFyQmF6UXV4MTIz/x+y",
    ),
    (
        "gcp service account json",
        '{"type": "service_account", "project_id": "shop", "private_key_id": '
        '"0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c", "private_key": '
        '"-----BEGIN PRIVATE KEY-----\\nMIIEvgIBADANBgkqhkiG9w0BAQEFAASCGcpSAkey\\n'
        '-----END PRIVATE KEY-----\\n", "client_email": "bot@shop.iam.gserviceaccount.com"}',
        "MIIEvgIBADANBgkqhkiG9w0BAQEFAASCGcpSAkey",
    ),
    (
        "gcp service account key id",
        '"private_key_id": "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c"',
        "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c",
    ),
    (
        "gcp api key",
        "key=AIzaSyD3mOFakeFakeFakeFakeFakeFakeFake1",
        "AIzaSyD3mOFakeFakeFakeFakeFakeFakeFake1",
    ),
    (
        "azure storage connection string",
        "DefaultEndpointsProtocol=https;AccountName=shop;AccountKey=Zm9vYmFyYmF6cXV4Zm9vYmFy"
        "YmF6cXV4Zm9vYmFyYmF6cXV4Zm9vYmFyYmF6cXV4Zm9vYmFyYmF6cXV4Zm9vYmFyYmF6cXV4MTIzNA==;"
        "EndpointSuffix=core.windows.net",
        "Zm9vYmFyYmF6cXV4Zm9vYmFyYmF6cXV4Zm9vYmFy",
    ),
    (
        "azure client secret",
        "AZURE_CLIENT_ID=abc CLIENT_SECRET_VALUE abc8Q~Fx3kQ9vLmN2pRsTuVwXyZ0123456789_ab",
        "abc8Q~Fx3kQ9vLmN2pRsTuVwXyZ0123456789_ab",
    ),
    (
        "azure sas url",
        "https://shop.blob.core.windows.net/c/f?sv=2022-11-02&sr=b&sig=Q2hlY2tvdXRTYXNTaWduYXR1cmU%3D",
        "Q2hlY2tvdXRTYXNTaWduYXR1cmU",
    ),
    (
        "github token",
        "remote: ghp_16C7e42F292c6912E7710c838347Ae178B4a",
        "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
    ),
    (
        "github fine-grained token",
        "GH=github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTU",
        "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
    ),
    ("gitlab token", "CI uses glpat-x1y2z3A4B5C6D7E8F9G0h", "glpat-x1y2z3A4B5C6D7E8F9G0h"),
    ("slack bot token", "bot xoxb-1234567890-0987654321-AbCdEfGhIjKlMnOp", "xoxb-1234567890"),
    ("slack app token", "xapp-1-A0123456789-1234567890123-abcdef0123", "xapp-1-A0123456789"),
    (
        "slack webhook",
        "notify https://hooks.slack.com/services/T0SHOP000/B0HOOK000/fakeWebhookSecret12345",
        "fakeWebhookSecret12345",
    ),
    ("stripe key", "STRIPE sk_live_4eC39HqLyjWDarjtT1zdp7dc", "sk_live_4eC39HqLyjWDarjtT1zdp7dc"),
    (
        "stripe restricted key",
        "rk_test_51Hb3c4d5e6f7g8h9i0jKLMN",
        "rk_test_51Hb3c4d5e6f7g8h9i0jKLMN",
    ),
    (
        "twilio api key",
        "twilio SK0123456789abcdef0123456789abcdef",
        "SK0123456789abcdef0123456789abcdef",
    ),
    (
        "sendgrid key",
        "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",
        "TwL2iGABf9DHoTf-09kqeF8tAmbihYzrnopKc-1s5cr",
    ),
    (
        "npm token",
        "//registry.npmjs.org/:_authToken=npm_Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr78",
        "npm_Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr78",
    ),
    (
        "pypi token",
        "password = pypi-AgEIcHlwaS5vcmcCJGFiY2RlZmdoLWlqa2wtbW5vcC1xcnN0LXV2d3h5ejEyMzQ1Ng",
        "AgEIcHlwaS5vcmcCJGFiY2RlZmdoLWlqa2wtbW5vcC1xcnN0",
    ),
    ("pem private key", f"tls.key: |\n  {_PEM}", "Zm9vYmFyYmF6cXV4UHJpdmF0ZUtleU1hdGVyaWFs"),
    (
        "openssh private key",
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\n"
        "-----END OPENSSH PRIVATE KEY-----",
        "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ",
    ),
    ("jwt", f"token {_JWT}", _JWT),
    ("bearer header", "Authorization: Bearer abcdef0123456789abcdef", "abcdef0123456789abcdef"),
    ("basic header", "Authorization: Basic ZGVwbG95OnMzY3IzdA==", "ZGVwbG95OnMzY3IzdA=="),
    ("token header", "Authorization: token 0a1b2c3d4e5f6a7b8c9d", "0a1b2c3d4e5f6a7b8c9d"),
    ("password in url", "DATABASE_URL=postgres://shop:Sup3rS3cret@db:5432/shop", "Sup3rS3cret"),
    ("mongodb url", "mongodb+srv://app:m0ng0Pass@cluster0.example.net/db", "m0ng0Pass"),
    ("redis url", "REDIS=redis://:r3disPassw0rd@cache:6379/0", "r3disPassw0rd"),
    ("url password with a slash", "postgres://app:pa/ss9W0rd@db:5432/shop", "pa/ss9W0rd"),
    ("url password with an at", "amqp://app:p@ssW0rd!@rabbit:5672/", "p@ssW0rd!"),
    ("mysql -p", "mysql -h db -u root -pMyS3cretPw shop < dump.sql", "MyS3cretPw"),
    ("mysqldump -p", "mysqldump -uroot -pDumpP4ss --all-databases", "DumpP4ss"),
    ("prose password", "fyi the password is Hunter2Blue for the staging db", "Hunter2Blue"),
    ("prose secret", "The secret was now: `xq9-Zt7-LmP` (rotated)", "xq9-Zt7-LmP"),
    ("prose token", "our deploy token is ghx8812kd0a", "ghx8812kd0a"),
    (
        "connection string",
        "Server=tcp:db,1433;Database=shop;User ID=sa;Password=Correct Horse 9;Encrypt=true",
        "Correct Horse 9",
    ),
    ("quoted password", 'password="correct horse battery staple"', "correct horse battery"),
    ("quoted secret yaml", "client_secret: 'open sesame now'", "open sesame now"),
    ("json password", '{"user": "app", "password": "two words"}', "two words"),
    ("escaped json password", '{\\"password\\": \\"in a string\\"}', "in a string"),
    ("env pair", "DB_PASSWORD=hunter2hunter2", "hunter2hunter2"),
    (
        "env var entry json",
        '{"name": "API_TOKEN", "value": "tok-live-998877"}',
        "tok-live-998877",
    ),
    ("env var entry yaml", "- name: SHOP_SECRET\n  value: s3cr3t-v4lue", "s3cr3t-v4lue"),
    (
        "kubeconfig client key",
        f"users:\n- name: admin\n  user:\n    client-key-data: {_B64_KEY}",
        _B64_KEY[30:70],
    ),
    ("kubeconfig base64 key anywhere", f"key {_B64_KEY}", _B64_KEY[30:70]),
    ("kubeconfig token", "    token: kubeconfigStaticT0ken123", "kubeconfigStaticT0ken123"),
    ("docker auths json", _DOCKER_JSON, "ZGVwbG95OnMzY3IzdFB1bGw="),
    ("dockerconfigjson", f".dockerconfigjson: {_DOCKER_B64}", _DOCKER_B64[12:50]),
    (
        "secret data yaml",
        "kind: Secret\ndata:\n  username: YWRtaW4=\n  password: c2VjcmV0UGFzcw==\n",
        "c2VjcmV0UGFzcw==",
    ),
    (
        "secret data json",
        '{"kind": "Secret", "data": {"tls.crt": "Q0VSVA==", "api": "YXBpU2VjcmV0VmFs"}}',
        "YXBpU2VjcmV0VmFs",
    ),
    (
        "openai key",
        "OPENAI sk-proj-AbCdEf0123456789GhIjKlMnOp",
        "sk-proj-AbCdEf0123456789GhIjKlMnOp",
    ),
    (
        "telegram bot token",
        "bot 123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsawq",
        "AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsawq",
    ),
    (
        "discord webhook",
        "https://discord.com/api/webhooks/123456789012345678/AbCdEfGhIjKlMnOpQrStUvWxYz012345",
        "AbCdEfGhIjKlMnOpQrStUvWxYz012345",
    ),
    (
        "api key header",
        "X-Api-Key: 5f4dcc3b5aa765d61d8327deb882cf99",
        "5f4dcc3b5aa765d61d8327deb882cf99",
    ),
]

# One text holding every secret, for pushing the whole corpus through an exit at once.
ALL_TEXT = "\n".join(text for _, text, _ in SECRETS)
ALL_SECRETS = [secret for _, _, secret in SECRETS]

# Ordinary cluster text that must come out unchanged.
HARMLESS = [
    "NAME                            READY   STATUS             RESTARTS   AGE",
    "checkout-api-7d9f8b6c5-x2x9z    0/1     CrashLoopBackOff   12         40m",
    "image: nginx:1.25.3",
    "max_tokens: 8192",
    "replicas: 3",
    "secretName: tls-cert",
    "kind: Secret",
    "The deployment mounts the Secret db-creds at /etc/creds.",
    "Back-off restarting failed container app in pod checkout-api",
    "https://grafana.example.com/d/abc?orgId=1&from=now-1h",
    "https://registry.npmjs.org:443/@types/node",
    "see (https://e.x)<https://e.x|ok><@U0BOB>",
    "http://proxy:8080/path@v2",
    "mysql -h db -u root -p shop",
    "The password field is empty in the form.",
]


def leaked(text: str) -> list[str]:
    """The corpus secrets that appear in `text`."""
    return [secret for secret in ALL_SECRETS if secret in text]
