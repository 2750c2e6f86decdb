"""Where the engine listens: in a container with a network of its own, on the port the
backend published to the host ($TRAINYARD_SERVICE_PORT), on every address of that network;
elsewhere where its config says (the host's loopback by default)."""

from __future__ import annotations

from engine.cli import listen_address
from engine.config import EngineConfig


def test_an_engine_in_a_container_listens_on_the_published_port():
    config = EngineConfig(base_model="/models/tiny")

    assert listen_address(config, {"TRAINYARD_SERVICE_PORT": "8000"}) == ("0.0.0.0", 8000)


def test_an_engine_on_the_host_keeps_its_loopback_and_any_free_port():
    config = EngineConfig(base_model="/models/tiny")

    assert listen_address(config, {}) == ("127.0.0.1", 0)
    assert listen_address(config, {"TRAINYARD_SERVICE_PORT": "²"}) == ("127.0.0.1", 0)


def test_a_port_the_config_names_wins():
    config = EngineConfig(base_model="/models/tiny", port=9100)

    assert listen_address(config, {"TRAINYARD_SERVICE_PORT": "8000"}) == ("127.0.0.1", 9100)
