"""What looks like a credential: a variable whose name says so, or a value of a token's published
shape (Hugging Face, GitHub, GitLab, AWS, Slack, OpenAI, Google, a JWT, a private key), or a URL
holding a password or a query parameter named for a credential (`?access_token=`, `&sig=`).

A case's variables are written into run.json, case.json and the report, so one that looks like a
credential is refused where the manifest is read (kit.plan.protocol). The variables the kit records of
the environment it runs in (NCCL_* in the fingerprints, which the report shows) are written with
such a value masked, whatever the name, with --redact and without. Tokens an engine needs
(HF_TOKEN) come from that environment and are handed on, never written down.
"""

from __future__ import annotations

import re

SECRET_NAME = re.compile(
    r"TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|PRIVATE|COOKIE|(^|_)(API_?)?KEY($|_)|(^|_)AUTH", re.IGNORECASE
)
SECRET_VALUE = re.compile(
    "|".join(
        [
            r"\bhf_[A-Za-z0-9]{16,}",  # Hugging Face
            r"\bgh[pousr]_[A-Za-z0-9]{20,}",
            r"\bgithub_pat_[A-Za-z0-9_]{20,}",  # GitHub
            r"\bglpat-[A-Za-z0-9_-]{20,}",  # GitLab
            r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[0-9A-Z]{16}\b",  # AWS access key id
            r"\bxox[abposr]-[A-Za-z0-9-]{10,}",  # Slack
            r"\bsk-[A-Za-z0-9_-]{20,}",  # OpenAI and alike
            r"\bAIza[0-9A-Za-z_-]{35}",  # Google API key
            r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.",  # a JSON Web Token
            r"-----BEGIN [A-Z ]*PRIVATE KEY-----",
            # scheme://user:password@host, the password holding any character but a space or '@'
            # (a '/' too: written unescaped it is still the password, whatever RFC 3986 says)
            r"[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:[^\s@]+@",
            # a URL's query or fragment parameter named for a credential: ?access_token=,
            # &sig= (Azure SAS), &X-Amz-Signature= (S3), &X-Goog-Credential=, ?password=, ?apikey=
            r"[?&;#][\w.~-]*(?i:token|secret|passw|pwd|key|sig|credential|auth|session)[\w.~-]*=[^&#\s]",
        ]
    )
)
MASKED = "<masked: looks like a credential>"


def looks_like_a_credential(name: str, value: str) -> bool:
    return bool(SECRET_NAME.search(name) or SECRET_VALUE.search(value))


def masked(env: dict[str, str]) -> dict[str, str]:
    """The variables as the kit writes them down: each that looks like a credential masked, and
    each byte that is not UTF-8 (os.environ holds it as a lone surrogate, which no JSON file can)
    written as its escape, `\\xff`."""
    return {
        written(name): MASKED if looks_like_a_credential(name, value) else written(value) for name, value in env.items()
    }


def written(text: str) -> str:
    """`text` with each byte that was not UTF-8 as its escape."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
