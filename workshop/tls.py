"""The hub's HTTPS certificate, made at its first start (workshop/jupyterhub_config.py).

A self-signed certificate: the traffic is encrypted, and learners can tell it is the room's hub by
comparing the SHA-256 fingerprint the hub prints at start with the one their browser shows.  It is
kept in the hub's state folder (the key readable by root only) and reused at every start, so a
learner accepts it once.  With a real certificate, put an HTTPS reverse proxy in front instead
(workshop/README.md).  Made with `cryptography` (a JupyterHub dependency, through certipy).
"""
from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def fingerprint(cert_path: Path) -> str:
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    return ":".join(f"{b:02X}" for b in cert.fingerprint(hashes.SHA256()))


def self_signed(folder: Path, names: list[str], ip: str) -> tuple[Path, Path, str]:
    """(certificate, key, fingerprint) for `names` plus localhost and 127.0.0.1 (and `ip` when it is
    one address); made once, then reused."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    cert_path, key_path = folder / "hub.crt", folder / "hub.key"
    if cert_path.exists() and key_path.exists():
        return cert_path, key_path, fingerprint(cert_path)
    key = ec.generate_private_key(ec.SECP256R1())
    dns = list(dict.fromkeys([*names, "localhost"]))
    ips = {ipaddress.ip_address("127.0.0.1")}
    if ip not in ("", "0.0.0.0", "::", "localhost"):
        ips.add(ipaddress.ip_address(ip))
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns[0])])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=90))
            .add_extension(x509.SubjectAlternativeName([*map(x509.DNSName, dns), *map(x509.IPAddress, ips)]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    key_path.touch(mode=0o600)
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert_path, key_path, fingerprint(cert_path)
