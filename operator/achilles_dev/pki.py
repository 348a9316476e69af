"""Certificates and keys for the local control plane.

The API server authenticates every client by a certificate signed by our own CA and
authorises it with RBAC, exactly as on a real cluster, so the identities here matter:
the admin is in `system:masters`, the controller-manager and the scheduler are
`system:kube-controller-manager` and `system:kube-scheduler` (bound by the bootstrap RBAC
policy), the real node is `system:node:<name>` in `system:nodes` (the Node authorizer and
NodeRestriction admission govern it) with kube-proxy as `system:kube-proxy`, and the API
server calls the kubelet as `kube-apiserver-kubelet-client` (`achilles_dev.rbac`). The
service-account key pair signs and verifies bound service-account tokens.

Files are created once and reused, so a restarted stack keeps its identities and
clients' kubeconfigs stay valid.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = datetime.timedelta(days=3650)
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
_KUBERNETES_SERVICE_IP = "10.0.0.1"  # first address of the range: the `kubernetes` Service

ADMIN_USER = "achilles:admin"
CONTROLLER_MANAGER_USER = "system:kube-controller-manager"
SCHEDULER_USER = "system:kube-scheduler"
# The real node's identities, as the bootstrap RBAC policy and the Node authorizer know them.
KUBE_PROXY_USER = "system:kube-proxy"
NODES_GROUP = "system:nodes"


def node_user(node_name: str) -> str:
    return f"system:node:{node_name}"


PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


@dataclass(frozen=True)
class KeyPair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Pki:
    directory: Path

    @property
    def ca(self) -> KeyPair:
        return self._pair("ca")

    @property
    def apiserver(self) -> KeyPair:
        return self._pair("apiserver")

    @property
    def controller_manager_serving(self) -> KeyPair:
        return self._pair("controller-manager-serving")

    @property
    def admin(self) -> KeyPair:
        return self._pair("admin")

    @property
    def controller_manager(self) -> KeyPair:
        return self._pair("controller-manager")

    @property
    def apiserver_kubelet_client(self) -> KeyPair:
        """How the API server authenticates to the kubelet's endpoint (logs, exec)."""
        return self._pair("apiserver-kubelet-client")

    @property
    def scheduler(self) -> KeyPair:
        return self._pair("scheduler")

    @property
    def scheduler_serving(self) -> KeyPair:
        return self._pair("scheduler-serving")

    @property
    def node(self) -> KeyPair:
        """The real kubelet's client identity: system:node:<name> in system:nodes."""
        return self._pair("node")

    @property
    def node_serving(self) -> KeyPair:
        """The real kubelet's HTTPS endpoint, valid for the node's IP."""
        return self._pair("node-serving")

    @property
    def kube_proxy(self) -> KeyPair:
        return self._pair("kube-proxy")

    @property
    def service_account_key(self) -> Path:
        return self.directory / "sa.key"

    @property
    def service_account_pub(self) -> Path:
        return self.directory / "sa.pub"

    def _pair(self, name: str) -> KeyPair:
        return KeyPair(cert=self.directory / f"{name}.crt", key=self.directory / f"{name}.key")


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _write_key(key: PrivateKey, path: Path) -> None:
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(pem)


def _load_key(path: Path) -> PrivateKey:
    key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey)
    return key


def _name(common_name: str, organisation: str | None = None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organisation:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organisation))
    return x509.Name(attributes)


def _ensure_ca(pair: KeyPair) -> tuple[x509.Certificate, PrivateKey]:
    if pair.cert.exists() and pair.key.exists():
        return x509.load_pem_x509_certificate(pair.cert.read_bytes()), _load_key(pair.key)
    key = ec.generate_private_key(ec.SECP256R1())
    name = _name("achilles-local-ca")
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_now() - datetime.timedelta(minutes=5))
        .not_valid_after(_now() + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    _write_key(key, pair.key)
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert, key


def _ensure_leaf(
    pair: KeyPair,
    ca: tuple[x509.Certificate, PrivateKey],
    subject: x509.Name,
    *,
    server_names: tuple[str, ...] = (),
    server_ips: tuple[str, ...] = (),
) -> None:
    if (
        pair.cert.exists()
        and pair.key.exists()
        and _is_issued_as(
            x509.load_pem_x509_certificate(pair.cert.read_bytes()),
            subject,
            server_names,
            server_ips,
        )
    ):
        return
    ca_cert, ca_key = ca
    key = ec.generate_private_key(ec.SECP256R1())
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server_names else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_now() - datetime.timedelta(minutes=5))
        .not_valid_after(_now() + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    )
    if server_names or server_ips:
        alternatives: list[x509.GeneralName] = [x509.DNSName(n) for n in server_names]
        alternatives += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in server_ips]
        builder = builder.add_extension(x509.SubjectAlternativeName(alternatives), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    _write_key(key, pair.key)
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _is_issued_as(
    cert: x509.Certificate, subject: x509.Name, names: tuple[str, ...], ips: tuple[str, ...]
) -> bool:
    """Whether an existing certificate already names what is asked (else it is reissued)."""
    if cert.subject != subject:
        return False
    try:
        alternatives = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return not names and not ips
    return set(alternatives.get_values_for_type(x509.DNSName)) == set(names) and set(
        alternatives.get_values_for_type(x509.IPAddress)
    ) == {ipaddress.ip_address(ip) for ip in ips}


@dataclass(frozen=True)
class NodeIdentity:
    """A real node's name and address, for its client and serving certificates."""

    name: str
    ip: str


def _ensure_service_account_keys(pki: Pki) -> None:
    if pki.service_account_key.exists() and pki.service_account_pub.exists():
        return
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write_key(key, pki.service_account_key)
    pki.service_account_pub.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


def ensure_pki(
    directory: Path, *, apiserver_ips: tuple[str, ...] = (), node: NodeIdentity | None = None
) -> Pki:
    """Create (once) the CA, serving and client certificates and the service-account keys.

    `apiserver_ips` are further addresses the API server serves on (a real node reaches it
    on the host's end of its veth); `node` adds the real kubelet's and kube-proxy's
    identities. A certificate that no longer names what is asked is reissued.
    """
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    pki = Pki(directory)
    ca = _ensure_ca(pki.ca)
    loopback = ("localhost",)
    _ensure_leaf(
        pki.apiserver,
        ca,
        _name("kube-apiserver"),
        server_names=(
            *loopback,
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        ),
        server_ips=("127.0.0.1", _KUBERNETES_SERVICE_IP, *apiserver_ips),
    )
    _ensure_leaf(
        pki.controller_manager_serving,
        ca,
        _name("kube-controller-manager"),
        server_names=loopback,
        server_ips=("127.0.0.1",),
    )
    _ensure_leaf(pki.apiserver_kubelet_client, ca, _name("kube-apiserver-kubelet-client"))
    _ensure_leaf(pki.admin, ca, _name(ADMIN_USER, "system:masters"))
    _ensure_leaf(pki.controller_manager, ca, _name(CONTROLLER_MANAGER_USER))
    _ensure_leaf(pki.scheduler, ca, _name(SCHEDULER_USER))
    _ensure_leaf(
        pki.scheduler_serving,
        ca,
        _name("kube-scheduler"),
        server_names=loopback,
        server_ips=("127.0.0.1",),
    )
    if node is not None:
        _ensure_leaf(pki.node, ca, _name(node_user(node.name), NODES_GROUP))
        _ensure_leaf(
            pki.node_serving,
            ca,
            _name(node_user(node.name), NODES_GROUP),
            server_names=(node.name,),
            server_ips=(node.ip,),
        )
        _ensure_leaf(pki.kube_proxy, ca, _name(KUBE_PROXY_USER))
    _ensure_service_account_keys(pki)
    return pki
