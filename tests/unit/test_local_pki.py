"""The local control plane's certificates: who each identity is, and what they are valid for."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from achilles_dev.pki import ADMIN_USER, ensure_pki
from achilles_dev.rbac import APISERVER_KUBELET_CLIENT


def load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_identities_and_serving_names(tmp_path: Path) -> None:
    pki = ensure_pki(tmp_path / "pki")
    ca = load(pki.ca.cert)

    apiserver = load(pki.apiserver.cert)
    apiserver.verify_directly_issued_by(ca)
    names = apiserver.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {"localhost", "kubernetes.default.svc"} <= set(names.get_values_for_type(x509.DNSName))
    assert ipaddress.ip_address("127.0.0.1") in names.get_values_for_type(x509.IPAddress)
    usage = apiserver.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in usage

    admin = load(pki.admin.cert)
    admin.verify_directly_issued_by(ca)
    assert admin.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == ADMIN_USER
    assert (
        admin.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:masters"
    )
    client = load(pki.apiserver_kubelet_client.cert)
    client.verify_directly_issued_by(ca)
    common_name = client.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
    assert common_name == APISERVER_KUBELET_CLIENT  # the name achilles_dev.rbac binds
    assert not client.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
    assert (pki.service_account_key.stat().st_mode & 0o777) == 0o600


def test_existing_files_are_reused(tmp_path: Path) -> None:
    first = ensure_pki(tmp_path / "pki")
    before = {p.name: p.read_bytes() for p in first.directory.iterdir()}
    second = ensure_pki(tmp_path / "pki")
    assert {p.name: p.read_bytes() for p in second.directory.iterdir()} == before
