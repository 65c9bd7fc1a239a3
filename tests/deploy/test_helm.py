"""The Helm chart: lint, render with several values files, validate against Kubernetes schemas."""

from __future__ import annotations

import json
from pathlib import Path

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

CHART = Path(__file__).parents[2] / "helm" / "loopwarden"
KUBE_VERSION = "1.30.0"
REPOSITORY = "registry.example.com/loopwarden"
"""Where an operator pushed the image they built: the one value the chart cannot default."""

VALUES = {
    "defaults": {},
    "redis-and-tenants": {
        "redis": {"url": "redis://redis:6379/0"},
        "tenants": {
            "content": "tenants:\n  - name: acme\n    key_sha256: ['"
            + "a" * 64
            + "']\n    upstream: {api_key_env: ACME_KEY}\n"
        },
        "upstreamKeys": {"ACME_KEY": "sk-acme"},
        "serviceMonitor": {"enabled": True},
        "grafanaDashboard": {"enabled": True},
    },
    "existing-secrets-cluster": {
        "redis": {"existingSecret": "redis-creds", "existingSecretKey": "url", "cluster": True},
        "tenants": {"existingSecret": "lw-tenants"},
        "upstreamKeysExistingSecret": "provider-keys",
        "autoscaling": {"enabled": False},
        "replicaCount": 3,
        "policies": {"default.yaml": "max_steps: 30\n"},
        "pricing": "models: {}\n",
        "otelEndpoint": "http://collector:4318/v1/traces",
        "console": {"existingSecret": "lw-console", "existingSecretKey": "secret"},
    },
}


def render(values: dict, *, repository: str | None = REPOSITORY) -> list[dict]:
    """The chart's manifests for ``values``, with the image repository an install names."""
    given = {**values, "image": {"repository": repository, **values.get("image", {})}} if repository else values
    chart = helm.Chart.load(str(CHART))
    rendered = chart.render(given, name="lw", namespace="agents")
    return [doc for text in rendered.values() for doc in yaml.safe_load_all(text) if doc]


def by_kind(docs: list[dict], kind: str) -> dict:
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}"
    return found[0]


def test_chart_lints_clean():
    report = helm.lint(str(CHART), {"image": {"repository": REPOSITORY}}, strict=True)

    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


@pytest.mark.parametrize("name", list(VALUES))
def test_every_manifest_is_valid_kubernetes(name):
    for doc in render(VALUES[name]):
        if doc["apiVersion"].startswith("monitoring.coreos.com"):
            continue  # a CRD: checked by shape below
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)


def test_deployment_is_hardened_and_probed():
    deployment = by_kind(render({}), "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]

    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["resources"]["limits"]["memory"] == "512Mi"
    assert pod["terminationGracePeriodSeconds"] > 30


def test_a_policy_change_rolls_the_pods():
    before = by_kind(render({"policies": {"default.yaml": "max_steps: 30\n"}}), "Deployment")
    after = by_kind(render({"policies": {"default.yaml": "max_steps: 40\n"}}), "Deployment")

    key = "checksum/policies"
    assert (
        before["spec"]["template"]["metadata"]["annotations"][key]
        != after["spec"]["template"]["metadata"]["annotations"][key]
    )


def test_secrets_reach_the_pod_as_references_not_values():
    docs = render(VALUES["redis-and-tenants"])
    env = {e["name"]: e for e in by_kind(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"]}

    assert env["LOOPWARDEN_REDIS_URL"]["valueFrom"]["secretKeyRef"]["key"] == "redis-url"
    assert env["ACME_KEY"]["valueFrom"]["secretKeyRef"]["key"] == "ACME_KEY"
    assert env["LOOPWARDEN_TENANTS_FILE"]["value"] == "/etc/loopwarden/tenants/tenants.yaml"
    assert "sk-acme" not in json.dumps(by_kind(docs, "Deployment"))
    assert by_kind(docs, "Secret")["stringData"]["ACME_KEY"] == "sk-acme"


def test_existing_secrets_and_cluster_mode():
    docs = render(VALUES["existing-secrets-cluster"])
    container = by_kind(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in container["env"]}

    assert env["LOOPWARDEN_REDIS_URL"]["valueFrom"]["secretKeyRef"] == {"name": "redis-creds", "key": "url"}
    assert env["LOOPWARDEN_REDIS_CLUSTER"]["value"] == "true"
    assert env["LOOPWARDEN_CONSOLE_SECRET"]["valueFrom"]["secretKeyRef"] == {"name": "lw-console", "key": "secret"}
    assert container["envFrom"] == [{"secretRef": {"name": "provider-keys"}}]
    assert by_kind(docs, "Deployment")["spec"]["replicas"] == 3
    assert not [d for d in docs if d["kind"] in ("Secret", "HorizontalPodAutoscaler")]


def test_hpa_pdb_and_optional_monitoring():
    docs = render(VALUES["redis-and-tenants"])

    assert by_kind(docs, "HorizontalPodAutoscaler")["spec"]["maxReplicas"] == 10
    assert by_kind(docs, "PodDisruptionBudget")["spec"]["minAvailable"] == 1
    assert by_kind(docs, "ServiceMonitor")["spec"]["endpoints"][0]["path"] == "/metrics"
    dashboards = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-dashboard")]
    assert json.loads(dashboards[0]["data"]["loopwarden.json"])["uid"] == "loopwarden"


@pytest.mark.parametrize(
    "values",
    [{"replicaCount": "two"}, {"redis": {"url": "http://not-redis"}}, {"logLevel": "loud"}, {"surprise": 1}],
)
def test_values_schema_rejects_bad_values(values):
    with pytest.raises(helm.HelmError):
        helm.Chart.load(str(CHART)).validate_schema(values)


def test_the_service_monitor_scrapes_the_metrics_listener_not_the_api_port():
    docs = render(VALUES["redis-and-tenants"])
    container = by_kind(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    env = {e["name"]: e.get("value") for e in container["env"]}
    service_ports = {p["name"]: p for p in by_kind(docs, "Service")["spec"]["ports"]}

    assert by_kind(docs, "ServiceMonitor")["spec"]["endpoints"][0]["port"] == "metrics"
    assert service_ports["metrics"]["targetPort"] == "metrics"
    assert ports["metrics"] == int(env["LOOPWARDEN_METRICS_PORT"]) != ports["http"]
    assert env["LOOPWARDEN_METRICS_HOST"] == "0.0.0.0"


def env_of(docs: list[dict]) -> dict[str, dict]:
    container = by_kind(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    return {entry["name"]: entry for entry in container["env"]}


def test_the_replicas_share_one_console_secret_from_the_charts_secret():
    docs = render({})
    secret = by_kind(docs, "Secret")

    reference = env_of(docs)["LOOPWARDEN_CONSOLE_SECRET"]["valueFrom"]["secretKeyRef"]

    assert reference == {"name": secret["metadata"]["name"], "key": "console-secret"}
    assert len(secret["stringData"]["console-secret"]) >= 32


def test_a_console_secret_given_is_the_one_used():
    secret = by_kind(render({"console": {"secret": "s" * 40}}), "Secret")

    assert secret["stringData"]["console-secret"] == "s" * 40


def test_the_console_admin_digest_and_secure_cookie_reach_the_pods():
    env = env_of(render({"console": {"adminKeySha256": "a" * 64, "cookieSecure": True}}))

    assert env["LOOPWARDEN_CONSOLE_ADMIN_KEY_SHA256"]["value"] == "a" * 64
    assert env["LOOPWARDEN_CONSOLE_COOKIE_SECURE"]["value"] == "true"


@pytest.mark.parametrize("console", [{"secret": "short"}, {"adminKeySha256": "not-a-digest"}])
def test_console_values_that_cannot_work_are_refused(console):
    with pytest.raises(Exception, match="console"):
        render({"console": console})


def test_without_an_image_repository_the_chart_refuses_to_render_naming_how_to_build_and_push_one():
    with pytest.raises(helm.HelmError) as refused:
        render({}, repository=None)

    message = str(refused.value)
    assert "image.repository is required" in message
    assert "docker build -t REGISTRY/loopwarden:TAG ." in message
    assert "docker push REGISTRY/loopwarden:TAG" in message
    assert "--set image.repository=REGISTRY/loopwarden" in message


def test_the_shipped_values_name_no_image_a_registry_would_have_to_publish():
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    assert values["image"]["repository"] == ""


def test_the_pod_runs_the_pushed_image_tagged_with_the_packages_version_unless_a_tag_is_set():
    from proxy.version import VERSION

    def image(values: dict) -> str:
        return by_kind(render(values), "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"]

    assert image({}) == f"{REPOSITORY}:{VERSION}"
    assert image({"image": {"tag": "2026-12-01"}}) == f"{REPOSITORY}:2026-12-01"


def test_the_charts_app_version_is_the_packages_version():
    from proxy.version import VERSION

    assert yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"] == VERSION


def test_the_readme_builds_pushes_and_installs_the_image_with_the_packages_version():
    from proxy.version import VERSION

    readme = (CHART.parents[1] / "README.md").read_text()
    deployment = readme.split("## Deployment", 1)[1]

    assert f"docker build -t {REPOSITORY}:{VERSION} ." in deployment
    assert f"docker push {REPOSITORY}:{VERSION}" in deployment
    install = deployment.split("helm install lw helm/loopwarden", 1)[1].split("```", 1)[0]
    assert f"--set image.repository={REPOSITORY}" in install
