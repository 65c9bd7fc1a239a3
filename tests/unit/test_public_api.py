"""The package's public names are exactly the declared ones."""

import proxy


def test_all_names_exist():
    assert all(hasattr(proxy, name) for name in proxy.__all__)


def test_public_api_is_what_we_promise():
    assert set(proxy.__all__) == {"ProxyError", "Settings", "UpstreamClient", "__version__", "create_app"}
