"""How traffic and metrics find the pods: Service selectors, per-pod Services and Ingress hosts for each
pod's --public-url, the disruption budget, the autoscaler on the daemon's sessions gauge through the
Prometheus adapter, the ServiceMonitor, and coturn beside them."""

import re

import yaml

from tests.deploy.daemon_facts import (
    argument_value,
    exported_metrics,
    get_routes,
)
from tests.deploy.kustomize import Resource, pod_spec
from tests.deploy.manifests import (
    ADAPTER_VALUES,
    COTURN,
    DAEMON,
    adapter_rules,
    config_value,
    container,
    daemon_args,
    find,
    max_replicas,
    one,
    pod_label_sets,
    secret_keys,
    selector_matches,
    turnserver_options,
    workloads,
)


def test_every_service_selects_the_pods_of_exactly_one_workload(resources: list[Resource]) -> None:
    replicas = max_replicas(resources)
    for service in find(resources, "Service"):
        selector = service["spec"]["selector"]
        matched = [
            workload
            for workload in workloads(resources)
            if any(selector_matches(selector, labels) for labels in pod_label_sets(workload, replicas))
        ]
        assert len(matched) == 1, f"Service {service['metadata']['name']} selects {len(matched)} workloads"
        port_names = set()
        spec = pod_spec(matched[0])
        assert spec is not None
        for item in spec["containers"]:
            port_names |= {port.get("name") for port in item.get("ports", [])}
            port_names |= {port["containerPort"] for port in item.get("ports", [])}
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in port_names, f"{service['metadata']['name']}: {port['targetPort']}"


def test_each_possible_pod_has_its_own_service_that_keeps_it_when_not_ready(
    resources: list[Resource],
) -> None:
    statefulset = one(resources, "StatefulSet", DAEMON)
    headless = one(resources, "Service", statefulset["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None" and headless["spec"]["publishNotReadyAddresses"] is True
    for index in range(max_replicas(resources)):
        pod = f"{DAEMON}-{index}"
        service = one(resources, "Service", pod)
        assert service["spec"]["selector"]["statefulset.kubernetes.io/pod-name"] == pod
        # a pod at --max-sessions (503 on /ready) or draining still owns its calls' later requests
        assert service["spec"]["publishNotReadyAddresses"] is True
    assert not find(resources, "Service", f"{DAEMON}-{max_replicas(resources)}"), "more Services than pods"
    new_calls = one(resources, "Service", DAEMON)
    assert not new_calls["spec"].get("publishNotReadyAddresses", False), "new calls go to ready pods only"


def ingress_routes(resources: list[Resource]) -> dict[str, str]:
    """Ingress host -> Service name."""
    routes: dict[str, str] = {}
    for ingress in find(resources, "Ingress"):
        for rule in ingress["spec"]["rules"]:
            (path,) = rule["http"]["paths"]
            assert path["path"] == "/" and path["pathType"] == "Prefix"
            routes[rule["host"]] = path["backend"]["service"]["name"]
    return routes


def test_each_pods_public_url_is_routed_to_that_pod(resources: list[Resource]) -> None:
    domain = config_value(resources, "livefuse-config", "public-domain")
    item = container(one(resources, "StatefulSet", DAEMON), DAEMON)
    template = next(
        variable["value"] for variable in item["env"] if variable["name"] == "LIVEFUSE_PUBLIC_URL"
    )
    routes = ingress_routes(resources)
    assert routes[domain] == DAEMON, "new calls: the Service of ready pods"
    for index in range(max_replicas(resources)):
        pod = f"{DAEMON}-{index}"
        url = template.replace("$(POD_NAME)", pod).replace("$(PUBLIC_DOMAIN)", domain)
        match = re.fullmatch(r"https://([^/:]+)", url)
        assert match, url
        service = one(resources, "Service", routes[match.group(1)])
        assert service["spec"]["selector"]["statefulset.kubernetes.io/pod-name"] == pod
    assert len(routes) == max_replicas(resources) + 1
    for ingress in find(resources, "Ingress"):
        tls_hosts = {host for entry in ingress["spec"]["tls"] for host in entry["hosts"]}
        assert {rule["host"] for rule in ingress["spec"]["rules"]} <= tls_hosts
        for rule in ingress["spec"]["rules"]:
            backend = rule["http"]["paths"][0]["backend"]["service"]
            ports = {port["name"] for port in one(resources, "Service", backend["name"])["spec"]["ports"]}
            assert backend["port"]["name"] in ports


def test_the_page_on_the_new_calls_host_may_call_every_pod_host(resources: list[Resource]) -> None:
    """The page comes from https://<public-domain>; its session's requests go to the pod's own host
    (the Location), another origin: each pod lets exactly the page's origin in (CORS)."""
    domain = config_value(resources, "livefuse-config", "public-domain")
    assert ingress_routes(resources)[domain] == DAEMON, "the page and new calls live on the domain"
    item = container(one(resources, "StatefulSet", DAEMON), DAEMON)
    origin = argument_value(daemon_args(resources), "--cors-origin")
    assert origin is not None
    for reference in re.findall(r"\$\((\w+)\)", origin):
        assert reference in [variable["name"] for variable in item["env"]], f"$({reference}) is not defined"
    assert origin.replace("$(PUBLIC_DOMAIN)", domain) == f"https://{domain}"


def test_disruption_budget_covers_the_daemon_pods_only(resources: list[Resource]) -> None:
    budget = one(resources, "PodDisruptionBudget", DAEMON)
    selector = budget["spec"]["selector"]["matchLabels"]
    assert selector_matches(selector, pod_label_sets(one(resources, "StatefulSet", DAEMON), 1)[0])
    assert not selector_matches(selector, pod_label_sets(one(resources, "Deployment", COTURN), 1)[0])
    assert budget["spec"]["maxUnavailable"] == 1


def test_autoscaler_scales_the_daemon_on_the_sessions_gauge_it_exports(resources: list[Resource]) -> None:
    autoscaler = one(resources, "HorizontalPodAutoscaler", DAEMON)
    target = autoscaler["spec"]["scaleTargetRef"]
    one(resources, target["kind"], target["name"])
    assert target["kind"] == "StatefulSet"
    (metric,) = autoscaler["spec"]["metrics"]
    assert metric["type"] == "Pods"
    name = metric["pods"]["metric"]["name"]
    (rule,) = [rule for rule in adapter_rules() if rule["name"]["as"] == name]
    series = re.match(r"(\w+)\{", rule["seriesQuery"])
    assert series, rule["seriesQuery"]
    assert exported_metrics().get(series.group(1)) == "gauge", (
        f"the daemon exports no gauge {series.group(1)}"
    )
    assert re.fullmatch(rule["name"]["matches"].strip("^$"), series.group(1))
    assert rule["resources"]["overrides"]["pod"]["resource"] == "pod"
    average = float(metric["pods"]["target"]["averageValue"])
    max_sessions = float(argument_value(daemon_args(resources), "--max-sessions") or 0)
    assert 0 < average < max_sessions, "scale out before pods are full (full pods leave the Service)"
    assert 1 <= autoscaler["spec"]["minReplicas"] <= autoscaler["spec"]["maxReplicas"]


def test_the_daemon_exports_a_sessions_gauge() -> None:
    # guards the parsing above: an empty or wrong metrics table would make the autoscaler test vacuous
    metrics = exported_metrics()
    assert metrics.get("livefuse_active_sessions") == "gauge"
    assert len(metrics) >= 5


def test_service_monitor_scrapes_each_pod_once_with_the_token(resources: list[Resource]) -> None:
    monitor = one(resources, "ServiceMonitor", DAEMON)
    selector = monitor["spec"]["selector"]["matchLabels"]
    selected = [
        service
        for service in find(resources, "Service")
        if selector_matches(selector, service["metadata"]["labels"])
    ]
    assert [service["metadata"]["name"] for service in selected] == [
        one(resources, "StatefulSet", DAEMON)["spec"]["serviceName"]
    ]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {port["name"] for port in selected[0]["spec"]["ports"]}
    assert endpoint["path"] == "/metrics" and "/metrics" in get_routes()
    credentials = endpoint["authorization"]["credentials"]
    assert credentials["key"] in secret_keys(resources, credentials["name"])
    token_source = next(
        variable["valueFrom"]["secretKeyRef"]
        for variable in container(one(resources, "StatefulSet", DAEMON), DAEMON)["env"]
        if variable["name"] == "LIVEFUSE_TOKEN"
    )
    assert token_source == {"name": credentials["name"], "key": credentials["key"]}


def test_coturn_runs_on_the_host_network_with_its_rendered_config(resources: list[Resource]) -> None:
    coturn = one(resources, "Deployment", COTURN)
    spec = pod_spec(coturn)
    assert spec is not None
    assert spec["hostNetwork"] is True and spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert coturn["spec"]["strategy"]["type"] == "Recreate", "two pods cannot bind one node's ports"
    config_map = one(resources, "ConfigMap", "livefuse-coturn")
    options = turnserver_options(config_map["data"]["turnserver.conf"])
    assert "use-auth-secret" in options and "static-auth-secret" not in options, (
        "the secret is never committed"
    )
    port = int(options["listening-port"][0])
    item = container(coturn, "coturn")
    assert item["livenessProbe"]["tcpSocket"]["port"] == port
    assert {entry["containerPort"] for entry in item["ports"]} == {port}
    script = "/etc/coturn-template/" + "start-coturn.sh"
    assert item["command"][-1] == script and "start-coturn.sh" in config_map["data"]
    mounted = {mount["mountPath"]: mount["name"] for mount in item["volumeMounts"]}
    assert mounted["/etc/coturn-template"] == "template"
    env = {variable["name"] for variable in item["env"]}
    assert re.findall(r"\$\{(TURN_[A-Z_]+)", config_map["data"]["start-coturn.sh"]) and all(
        name in env for name in re.findall(r"\$\{(TURN_[A-Z_]+):\?", config_map["data"]["start-coturn.sh"])
    )
    # the ICE servers handed to clients point at this coturn's port, with both transports
    servers = config_value(resources, "livefuse-config", "ice-servers").split(",")
    assert {
        f"turn:{host}:{port}?transport={transport}"
        for host in {s.split(":")[1] for s in servers}
        for transport in ("udp", "tcp")
    } <= set(servers)
    turn_secret = next(
        variable["valueFrom"]["secretKeyRef"] for variable in item["env"] if variable["name"] == "TURN_SECRET"
    )
    daemon_secret = next(
        variable["valueFrom"]["secretKeyRef"]
        for variable in container(one(resources, "StatefulSet", DAEMON), DAEMON)["env"]
        if variable["name"] == "LIVEFUSE_TURN_SECRET"
    )
    assert turn_secret == daemon_secret, "coturn and the daemon must share one secret"


def test_adapter_values_are_the_chart_shape() -> None:
    values = yaml.safe_load(ADAPTER_VALUES.read_text(encoding="utf-8"))
    assert values["rules"]["default"] is False
    for rule in values["rules"]["custom"]:
        assert {"seriesQuery", "resources", "name", "metricsQuery"} <= set(rule)
        assert "<<.Series>>" in rule["metricsQuery"] and "<<.LabelMatchers>>" in rule["metricsQuery"]
