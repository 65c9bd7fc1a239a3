"""The package's public names are exactly the declared ones."""

import proxy


def test_all_names_exist():
    assert all(hasattr(proxy, name) for name in proxy.__all__)


def test_public_api_is_what_we_promise():
    assert set(proxy.__all__) == {"ProxyError", "Settings", "UpstreamClient", "__version__", "create_app"}


def test_importing_the_package_does_not_load_the_server():
    import subprocess
    import sys

    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, proxy.cli; print('proxy.edge.app' in sys.modules)"],
        capture_output=True,
        text=True,
        check=True,
    )

    assert loaded.stdout.strip() == "False"


def test_the_lazy_names_are_the_server_parts():
    from proxy.edge.app import create_app
    from proxy.upstream.client import UpstreamClient

    assert proxy.create_app is create_app
    assert proxy.UpstreamClient is UpstreamClient
