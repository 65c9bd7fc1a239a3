"""Upstream hosts: every notation of an address is normalized before the metadata check."""

from __future__ import annotations

import ipaddress

import pytest

from proxy.edge.tenants import check_upstream_url
from proxy.upstream.addresses import blocked_reason, host_address


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("169.254.169.254", "169.254.169.254"),
        ("2852039166", "169.254.169.254"),
        ("0xa9fea9fe", "169.254.169.254"),
        ("0XA9FEA9FE", "169.254.169.254"),
        ("0251.0376.0251.0376", "169.254.169.254"),
        ("0xa9.0xfe.0xa9.0xfe", "169.254.169.254"),
        ("169.254.43518", "169.254.169.254"),
        ("169.16689662", "169.254.169.254"),
        ("169.254.169.254.", "169.254.169.254"),
        ("0", "0.0.0.0"),
        ("127.1", "127.0.0.1"),
        ("::ffff:169.254.169.254", "169.254.169.254"),
        ("::ffff:a9fe:a9fe", "169.254.169.254"),
        ("64:ff9b::a9fe:a9fe", "169.254.169.254"),
        ("2002:a9fe:a9fe::", "169.254.169.254"),
        ("::169.254.169.254", "169.254.169.254"),
        ("fd00:ec2::254", "fd00:ec2::254"),
        ("fe80::1%25eth0", "fe80::1"),
        ("::1", "::1"),
    ],
)
def test_host_notations_normalize_to_the_address_they_reach(host, address):
    assert host_address(host) == ipaddress.ip_address(address)


@pytest.mark.parametrize("host", ["api.openai.com", "localhost", "vllm-0.models.svc", "a1.example", "0xg1"])
def test_names_are_not_addresses(host):
    assert host_address(host) is None


@pytest.mark.parametrize("host", ["1.2.3.4.5", "256.1.1.1", "1.2.65536", "08.1.1.1", "foo.1"])
def test_hosts_ending_in_a_number_that_is_no_address_are_refused(host):
    with pytest.raises(ValueError, match="upstream"):
        host_address(host)


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest",
        "http://[::ffff:169.254.169.254]/",
        "http://2852039166/",
        "http://0xa9fea9fe/",
        "http://0251.0376.0251.0376/",
        "http://169.254.43518/",
        "http://[fd00:ec2::254]/",
        "http://[fd00:ec2::23]/",
        "http://100.100.100.200/",
        "http://169.254.170.2/v2/credentials",
        "http://192.0.0.192/",
        "http://[64:ff9b::a9fe:a9fe]/",
        "http://[2002:a9fe:a9fe::]/",
        "http://0/",
        "http://0.0.0.0/",
        "http://0.1.2.3/",
        "http://[::]/",
        "http://[fe80::1%25eth0]/",
        "http://224.0.0.1/",
        "http://metadata.google.internal./",
        "http://METADATA.GOOGLE.INTERNAL/",
        "http://metadata.goog/",
        "http://instance-data.ec2.internal/",
        "http://metadata.tencentyun.com/",
        # dots IDNA maps to '.', as httpx does before it connects
        "http://169\u3002254\u3002169\u3002254/",
        "http://169\uff0e254\uff0e169\uff0e254/",
        "http://169\uff61254\uff61169\uff61254/",
        "http://metadata\u3002google\u3002internal/",
        "http://[::ffff:0:a9fe:a9fe]/",  # IPv4-translated (SIIT)
    ],
)
def test_metadata_and_link_local_upstreams_are_refused_in_any_notation(url):
    with pytest.raises(ValueError, match="upstream"):
        check_upstream_url(url)


@pytest.mark.parametrize(
    "url",
    [
        "https://api.openai.com/v1",
        "http://127.0.0.1:8000/v1",
        "http://127.1:8000/v1",
        "http://10.0.0.5/v1",
        "http://100.64.0.1/v1",
        "http://[::1]:80/v1",
        "http://[fd00::5]/v1",
        "http://ollama:11434/v1",
    ],
)
def test_ordinary_upstreams_still_pass(url):
    assert check_upstream_url(url) == url


def test_a_name_is_never_blocked_for_looking_like_a_metadata_name():
    assert blocked_reason("metadata.example.com") is None
