"""`GET /api/v1/compute/catalog/accelerators`: the whole seeded catalog, by stable name.
(tests/accounts/test_whoami.py checks the endpoint answers at all.)"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db

SEEDED = [
    ("amd-mi300x-192gb", "amd", 192, [1, 2, 4, 8], ["infinity-fabric"]),
    ("cpu", "none", 0, [1], []),
    ("nvidia-a100-80gb", "nvidia", 80, [1, 2, 4, 8], ["pcie", "nvlink"]),
    ("nvidia-h100-80gb", "nvidia", 80, [1, 2, 4, 8], ["pcie", "nvlink"]),
    ("nvidia-h200-141gb", "nvidia", 141, [1, 2, 4, 8], ["nvlink"]),
    ("nvidia-l40s-48gb", "nvidia", 48, [1, 2, 4, 8], ["pcie"]),
    ("nvidia-rtx-4090-24gb", "nvidia", 24, [1, 2, 3, 4, 5, 6, 7, 8], ["pcie"]),
]


def test_it_lists_the_seeded_catalog_by_name(api_client_for, org):
    response = api_client_for(org).get("/api/v1/compute/catalog/accelerators")
    assert response.status_code == 200
    page = response.json()
    assert (page["total"], page["next_cursor"]) == (len(SEEDED), None)
    assert [
        (a["name"], a["vendor"], a["memory_gb"], a["gpu_counts"], a["interconnects"])
        for a in page["data"]
    ] == SEEDED


def test_an_entry_has_the_reference_shape(api_client_for, org):
    data = api_client_for(org).get("/api/v1/compute/catalog/accelerators").json()["data"]
    assert next(a for a in data if a["name"] == "nvidia-rtx-4090-24gb") == {
        "name": "nvidia-rtx-4090-24gb",
        "display_name": "NVIDIA GeForce RTX 4090 24GB",
        "vendor": "nvidia",
        "memory_gb": 24,
        "gpu_counts": [1, 2, 3, 4, 5, 6, 7, 8],
        "interconnects": ["pcie"],
    }
