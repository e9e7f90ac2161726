"""Planted credentials for the recall tests and the engine benchmark.

Every sample is generated from a fixed seed in the real format of its kind (random-looking:
scanners rightly drop `AbCdEf0123...`-style fakes and AWS's documented EXAMPLE keys). Each
entry is (kind, text to plant, needle): the needle is the secret part that must appear in no
object of the store, the user's repository or a bundle.
"""
from __future__ import annotations

import base64
import random
import string

_R = random.Random(20261201)
ALNUM = string.ascii_letters + string.digits
UPPER_DIGITS = string.ascii_uppercase + string.digits
HEX = "0123456789abcdef"
B64 = ALNUM + "+/"
URLSAFE = ALNUM + "-_"


def _s(alphabet: str, n: int) -> str:
    return "".join(_R.choice(alphabet) for _ in range(n))


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _pem(label: str, nbytes: int = 600) -> tuple[str, str]:
    body = base64.b64encode(_R.randbytes(nbytes)).decode()
    lines = [body[i:i + 64] for i in range(0, len(body), 64)]
    text = f"-----BEGIN {label}-----\n" + "\n".join(lines) + f"\n-----END {label}-----\n"
    return text, lines[3]  # a body line: the key, not just its header, must never be stored


def _jwt() -> str:
    header = _b64url(b'{"alg":"HS256","typ":"JWT"}')
    payload = _b64url(('{"sub":"%s","name":"svc-%s","iat":1716239022}' % (_s(HEX, 12), _s(HEX, 6))).encode())
    return f"{header}.{payload}.{_b64url(_R.randbytes(32))}"


def _samples() -> list[tuple[str, str, str]]:
    out: list[tuple[str, str, str]] = []

    def add(kind: str, text: str, needle: str | None = None):
        out.append((kind, text, needle or text))

    akid = "AKIA" + _s("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16)
    sak = _s(B64, 40)
    add("aws access key pair", f"aws_access_key_id = {akid}\naws_secret_access_key = {sak}\n", sak)
    add("gcp api key", f"GOOGLE_API_KEY=AIza{_s(URLSAFE, 35)}\n")
    pk, pk_line = _pem("PRIVATE KEY", 900)
    sa = ('{"type": "service_account", "project_id": "acme-prod-%s", "private_key_id": "%s", '
          '"private_key": "%s", "client_email": "svc@acme-prod.iam.gserviceaccount.com"}\n'
          % (_s(HEX, 4), _s(HEX, 40), pk.replace("\n", "\\n")))
    add("gcp service account", sa, pk_line)
    acct = "acme" + _s(string.ascii_lowercase + string.digits, 8)
    azkey = _s(B64, 86) + "=="
    add("azure storage key", f"DefaultEndpointsProtocol=https;AccountName={acct};AccountKey={azkey};"
        "EndpointSuffix=core.windows.net\n", azkey)
    add("azure ad client secret", f'client_secret = "{_s(ALNUM, 3)}8Q~{_s(ALNUM + "_~.-", 34)}"\n')
    add("github pat", f"token: ghp_{_s(ALNUM, 36)}\n")
    add("github oauth", f"GH_OAUTH=gho_{_s(ALNUM, 36)}\n")
    add("github fine-grained pat", f"github_pat_{_s(ALNUM, 22)}_{_s(ALNUM, 59)}\n")
    add("github app token", f"ghs_{_s(ALNUM, 36)}\n")
    add("gitlab pat", f"GITLAB_TOKEN=glpat-{_s(URLSAFE, 20)}\n")
    add("slack bot token", f"xoxb-{_s(string.digits, 12)}-{_s(string.digits, 13)}-{_s(ALNUM, 24)}\n")
    add("slack webhook", f"https://hooks.slack.com/services/T{_s(UPPER_DIGITS, 10)}/B{_s(UPPER_DIGITS, 10)}/"
        f"{_s(ALNUM, 24)}\n")
    add("stripe live key", f'stripe.api_key = "sk_live_{_s(ALNUM, 99)}"\n')
    add("twilio api key", f"TWILIO_API_KEY=SK{_s(HEX, 32)}\n")
    add("sendgrid key", f"SENDGRID_API_KEY=SG.{_s(URLSAFE, 22)}.{_s(URLSAFE, 43)}\n")
    add("openai project key", f"OPENAI_API_KEY=sk-proj-{_s(URLSAFE, 74)}T3BlbkFJ{_s(URLSAFE, 74)}\n")
    add("anthropic key", f"ANTHROPIC_API_KEY=sk-ant-api03-{_s(URLSAFE, 93)}AA\n")
    add("npm token", f"//registry.npmjs.org/:_authToken=npm_{_s(ALNUM, 36)}\n")
    add("pypi token", f"password = pypi-AgEIcHlwaS5vcmc{_s(URLSAFE, 70)}\n")
    add("huggingface token", f"HF_TOKEN=hf_{_s(string.ascii_letters, 34)}\n")
    add("digitalocean token", f"DO_TOKEN=dop_v1_{_s(HEX, 64)}\n")
    add("shopify token", f"SHOPIFY_TOKEN=shpat_{_s(HEX, 32)}\n")
    add("vault token", f"VAULT_TOKEN=hvs.{_s(URLSAFE, 90)}\n")
    add("age secret key", "AGE-SECRET-KEY-1" + _s("QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L", 58) + "\n")
    add("telegram bot token", f"TELEGRAM_BOT_TOKEN={_s(string.digits, 10)}:AA{_s(URLSAFE, 33)}\n")
    add("databricks token", f"DATABRICKS_TOKEN=dapi{_s(HEX, 32)}\n")
    for label in ("RSA PRIVATE KEY", "EC PRIVATE KEY", "DSA PRIVATE KEY", "OPENSSH PRIVATE KEY",
                  "PRIVATE KEY", "ENCRYPTED PRIVATE KEY"):
        text, line = _pem(label)
        add(f"pem {label.lower()}", text, line)
    pgp_body = base64.b64encode(_R.randbytes(600)).decode()
    pgp_lines = [pgp_body[i:i + 64] for i in range(0, len(pgp_body), 64)]
    add("pgp private key block", "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n" + "\n".join(pgp_lines)
        + "\n-----END PGP PRIVATE KEY BLOCK-----\n", pgp_lines[3])
    add("jwt", f"Authorization: Bearer {_jwt()}\n", None)
    pw = _s(ALNUM, 20)
    add("url password", f"DATABASE_URL=postgres://app_rw:{pw}@db.internal.acme.io:5432/prod\n", pw)
    pw2 = _s(ALNUM, 12) + "#" + _s(ALNUM, 6)
    add(".env password line", f"DB_PASSWORD={pw2}\n", pw2)
    sk = _s(ALNUM + "!@%^*", 50)
    add("django secret key", f"SECRET_KEY = '{sk}'\n", sk)
    return out


SAMPLES = _samples()
# the JWT entry's needle is the whole line; use the signature part (the secret half)
SAMPLES = [(k, t, (t.strip().rsplit(".", 1)[1] if k == "jwt" else n)) for k, t, n in SAMPLES]
KINDS = [k for k, _t, _n in SAMPLES]
NEEDLES = [n for _k, _t, n in SAMPLES]


def one_line(text: str) -> str:
    """A sample on one line (for fields that are one line): PEM newlines as spaces."""
    return text.strip().replace("\n", " ")
