import pytest

from apps.secrets.models import Secret

pytestmark = pytest.mark.django_db

URL = "/api/v1/compute/secrets"


def test_walking_the_cursors_returns_every_secret_once_in_order(
    api_client_for, org, other_org, make_secret
):
    made = [make_secret(org, f"s{n}", {"K": str(n)}).public_id for n in range(5)]
    make_secret(other_org, "not-mine")
    client = api_client_for(org)
    seen, pages, cursor = [], [], None
    while True:
        params = {"limit": 2} | ({"cursor": cursor} if cursor else {})
        body = client.get(URL, params).json()
        assert body["total"] == 5
        pages.append(len(body["data"]))
        seen += [s["id"] for s in body["data"]]
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert seen == made
    assert pages == [2, 2, 1]


def test_rows_with_the_same_created_at_are_ordered_by_id(api_client_for, org, make_secret):
    made = [make_secret(org, f"s{n}") for n in range(3)]
    Secret.objects.filter(organization=org).update(created_at=made[0].created_at)
    client = api_client_for(org)
    first = client.get(URL, {"limit": 2}).json()
    second = client.get(URL, {"limit": 2, "cursor": first["next_cursor"]}).json()
    assert [s["id"] for s in first["data"] + second["data"]] == [s.public_id for s in made]
    assert second["next_cursor"] is None


def test_an_exactly_full_last_page_has_no_next_cursor(api_client_for, org, make_secret):
    for n in range(2):
        make_secret(org, f"s{n}")
    body = api_client_for(org).get(URL, {"limit": 2}).json()
    assert len(body["data"]) == 2
    assert body["next_cursor"] is None


def test_the_default_page_is_50(api_client_for, org, make_secret):
    for n in range(51):
        make_secret(org, f"s{n}")
    body = api_client_for(org).get(URL).json()
    assert len(body["data"]) == 50
    assert body["next_cursor"] is not None
    assert body["total"] == 51


@pytest.mark.parametrize(
    ("params", "param"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": 201}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"cursor": "not-a-cursor"}, "cursor"),
        ({"cursor": "WzEsMl0"}, "cursor"),  # base64 of [1,2]: valid JSON, wrong contents
    ],
)
def test_a_bad_limit_or_cursor_is_invalid_request(api_client_for, org, params, param):
    response = api_client_for(org).get(URL, params)
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request"
    assert response.json()["error"]["param"] == param
