"""The Billing page: the organization's money cards, budgets as bars, spend per day, its
wallet's transfers with cursor paging, never another organization's rows; and its websocket,
which re-renders the cards and bars after a ledger write commits."""

from __future__ import annotations

import asyncio
import json
import re

import pytest
from channels.db import database_sync_to_async

from apps.accounts import services as account_services
from apps.accounts.models import Membership
from apps.billing import budgets, holds, ledger, selectors, services, usage
from apps.billing.live import billing_group
from apps.billing.models import Budget, Transfer
from apps.core.live import watched
from apps.core.money import format_usd
from tests.sockets import SOCKET_TEST, socket_counts_reset, websocket

PAGE = "/o/acme/billing/"
PRICE = 100_000  # the seeded cpu offer: $0.10 per slot-hour


def bill(attempt, minutes: int) -> None:
    """Post `minutes` of the attempt's usage, as jobs' billing does."""
    job = attempt.job
    usage.record(
        attempt_id=attempt.pk,
        job_id=job.pk,
        organization_id=job.organization_id,
        project_id=job.project_id,
        resource_id=job.public_id,
        resource_name=job.name,
        price_micros_hr=attempt.price_micros_hr,
        billed_minutes=minutes,
    )


def place_hold(attempt, amount: int = 200_000) -> None:
    job = attempt.job
    holds.place_hold(
        organization_id=job.organization_id,
        project_id=job.project_id,
        job_id=job.pk,
        amount_micros=amount,
        idempotency_key=f"hold:{job.public_id}",
    )


def budget(org, limit_micros: int, *, public_id: str, **fields) -> Budget:
    return Budget.objects.create(
        public_id=public_id,
        organization=org,
        limit_micros=limit_micros,
        period=fields.pop("period", Budget.Period.MONTH),
        thresholds=fields.pop("thresholds", [50, 80, 100]),
        **fields,
    )


def card(body: str, name: str) -> str:
    return re.search(rf'<div id="billing-{name}"[^>]*>(.*?)</div>', body, re.S).group(1)


def transfer_ids(body: str) -> list[int]:
    return [int(n) for n in re.findall(r'<tr id="transfer-(\d+)"', body)]


def older_url(body: str) -> str | None:
    found = re.search(r'hx-get="([^"]+)"', body)
    return found.group(1).replace("&amp;", "&") if found else None


@pytest.mark.django_db
class TestPage:
    def test_the_cards_show_balance_held_available_and_burn(
        self, client_for, member, org, cpu_offer, hold
    ):
        attempt = hold(cpu_offer)
        place_hold(attempt)
        bill(attempt, 30)  # $0.05 at $0.10 / h

        body = client_for(member).get(PAGE).content.decode()

        assert format_usd(999_950_000) in card(body, "balance")
        assert "$0.20" in card(body, "held")
        assert format_usd(999_750_000) in card(body, "available")
        assert "$0.10 / h" in card(body, "burn")
        summary = selectors.account_summary(org.pk)
        assert f'data-micros="{summary.available_micros}"' in body
        assert 'href="/api/v1/compute/usage.csv"' in body
        assert 'ws-connect="/ws/billing/acme/"' in body

    def test_the_current_organizations_page_is_at_billing(self, client_for, member, outsider):
        response = client_for(member).get("/billing/")
        assert response.status_code == 200
        assert "$1,000.00" in card(response.content.decode(), "balance")
        assert 'ws-connect="/ws/billing/acme/"' in response.content.decode()
        # The outsider's current organization is their own.
        assert (
            'ws-connect="/ws/billing/globex/"'
            in client_for(outsider).get("/billing/").content.decode()
        )

    def test_the_navigation_has_a_billing_tab(self, client_for, member, org):
        body = client_for(member).get("/o/acme/projects/").content.decode()
        assert '<a href="/o/acme/billing/">Billing</a>' in body

    def test_a_viewer_sees_it_too(self, client_for, viewer, org):
        assert client_for(viewer).get(PAGE).status_code == 200

    def test_budgets_show_as_bars_with_percent_ticks_and_a_crossed_state(
        self, client_for, member, org, cpu_offer, hold
    ):
        bill(hold(cpu_offer), 30)  # $0.05 spent
        budget(org, 1_000_000, public_id="bud_calm", name="Calm")  # 5 %
        budget(org, 100_000, public_id="bud_half", name="Half")  # 50 %
        budget(org, 60_000, public_id="bud_near", name="Near", action=Budget.Action.BLOCK)

        body = client_for(member).get(PAGE).content.decode()

        calm = re.search(r'<div id="budget-bud_calm"[^>]*>', body).group(0)
        assert 'data-state="ok"' in calm and 'data-crossed="0"' in calm
        half = re.search(r'<div id="budget-bud_half".*?</div>\s*</div>', body, re.S).group(0)
        assert 'data-state="crossed"' in half and "budget-crossed" in half
        assert "50.0%" in half and "$0.05</span> of $0.10" in half
        assert half.count('class="budget-tick') == 3
        assert 'class="budget-tick passed" style="left: 50%"' in half
        near = re.search(r'<div id="budget-bud_near"[^>]*>', body).group(0)
        assert 'data-state="over-80"' in near and 'data-crossed="80"' in near
        assert "action block" in body

    def test_recent_budget_notices_are_listed(self, client_for, member, org, cpu_offer, hold):
        bill(hold(cpu_offer), 30)
        budget(org, 100_000, public_id="bud_half")
        budgets.evaluate()

        body = client_for(member).get(PAGE).content.decode()

        assert re.search(r'<li id="notice-\d+" class="budget-notice">', body)
        assert "<strong>50%</strong>" in body

    def test_spend_per_day_is_embedded_for_the_chart(
        self, client_for, member, org, cpu_offer, hold
    ):
        bill(hold(cpu_offer), 60)  # $0.10

        body = client_for(member).get(PAGE).content.decode()

        found = re.search(r'<script id="spend-data" type="application/json">(.*?)</script>', body)
        data = json.loads(found.group(1))
        assert len(data["x"]) == 30
        (series,) = data["series"]
        assert series["values"][-1] == pytest.approx(0.10)
        assert sum(series["values"]) == pytest.approx(0.10)

    def test_transactions_page_newest_first_and_the_older_page_holds_the_rest(
        self, client_for, member, org
    ):
        for n in range(30):
            ledger.grant(organization=org, amount_micros=1_000 + n, idempotency_key=f"g{n}")
        expected = list(
            Transfer.objects.filter(organization=org).order_by("-id").values_list("id", flat=True)
        )
        assert len(expected) == 31  # and the factory's grant
        client = client_for(member)

        first = client.get(PAGE).content.decode()
        assert transfer_ids(first) == expected[:25]
        assert '+<span class="money" title="$0.001029">$0.001</span>' in first  # the newest grant
        url = older_url(first)
        assert url.startswith("/o/acme/billing/transfers/?cursor=")
        assert 'href="/o/acme/billing/?cursor=' in first  # and without JavaScript

        older = client.get(url, headers={"HX-Request": "true"}).content.decode()
        assert transfer_ids(older) == expected[25:]
        assert older_url(older) is None
        assert "<html" not in older

        plain = client.get(url.replace("/transfers/", "/")).content.decode()
        assert transfer_ids(plain) == expected[25:]

    def test_a_debit_shows_negative_with_its_job_and_minutes(
        self, client_for, member, org, cpu_offer, hold
    ):
        attempt = hold(cpu_offer)
        bill(attempt, 30)
        row = Transfer.objects.get(organization=org, code="usage")

        body = client_for(member).get(PAGE).content.decode()

        html = re.search(rf'<tr id="transfer-{row.pk}".*?</tr>', body, re.S).group(0)
        assert "\N{MINUS SIGN}$0.05" in html
        assert f'href="/o/acme/jobs/{attempt.job.public_id}/"' in html
        assert "<td>30</td>" in html

    def test_a_hold_shows_as_held_and_its_void_as_released_not_as_spend(
        self, client_for, member, org
    ):
        from apps.jobs import services
        from tests.jobs.helpers import job_body

        job = services.job_create(organization=org, payload=job_body(), idempotency_key="k").job
        services.job_terminate(job=job)
        hold = Transfer.objects.get(organization=org, code="hold", state="pending")
        void = Transfer.objects.get(pending=hold)

        body = client_for(member).get(PAGE).content.decode()

        held = re.search(rf'<tr id="transfer-{hold.pk}".*?</tr>', body, re.S).group(0)
        released = re.search(rf'<tr id="transfer-{void.pk}".*?</tr>', body, re.S).group(0)
        assert "held $0.20" in held and "\N{MINUS SIGN}" not in held
        assert "released $0.20" in released

    def test_a_bad_cursor_shows_the_newest(self, client_for, member, org):
        response = client_for(member).get(PAGE, {"cursor": "not-a-cursor"})
        assert response.status_code == 200
        assert transfer_ids(response.content.decode())

    def test_another_organizations_transfers_never_show(
        self, client_for, member, org, other_org, outsider
    ):
        for n in range(30):
            ledger.grant(organization=other_org, amount_micros=7_777, idempotency_key=f"o{n}")
        theirs = set(Transfer.objects.filter(organization=other_org).values_list("id", flat=True))
        client = client_for(member)

        first = client.get(PAGE).content.decode()
        shown = set(transfer_ids(first))
        assert shown and not shown & theirs
        assert "$0.007777" not in first and "$0.008" not in first
        assert "$1,000.00" in card(first, "balance")  # not the sum of both
        # Their cursor on our page lists only our rows.
        cursor = older_url(client_for(outsider).get("/o/globex/billing/").content.decode())
        ours = set(Transfer.objects.filter(organization=org).values_list("id", flat=True))
        mixed = client.get(cursor.replace("globex", "acme")).content.decode()
        assert set(transfer_ids(mixed)) <= ours
        assert client.get("/o/globex/billing/").status_code == 404
        assert client.get("/o/globex/billing/transfers/").status_code == 404

    def test_anonymous_is_sent_to_sign_in(self, client, org):
        for path in ("/billing/", PAGE, "/o/acme/billing/transfers/"):
            response = client.get(path)
            assert response.status_code == 302
            assert response["Location"].startswith("/accounts/login/")


# -- the websocket -------------------------------------------------------------------------


@pytest.fixture
def anyio_backend():
    return "asyncio"


_sockets_reset = socket_counts_reset("trainyard:watchers:billing.*")


async def _receive_until(socket, needle: str, timeout: float = 5) -> str:
    """Messages until one contains `needle` (pushes coalesce, so an earlier one may show an
    earlier state)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        html = await socket.receive_from(timeout=max(0.1, deadline - loop.time()))
        if needle in html:
            return html


@pytest.mark.usefixtures("_sockets_reset")
class TestSocket:
    pytestmark = SOCKET_TEST

    async def test_anonymous_is_closed_4401(self, org):
        socket = await websocket("/ws/billing/acme/")
        await socket.connect()
        assert await socket.receive_output(timeout=2) == {"type": "websocket.close", "code": 4401}

    async def test_a_non_member_is_closed_4403(self, outsider, org):
        socket = await websocket("/ws/billing/acme/", outsider)
        assert (await socket.connect())[0]
        assert await socket.receive_output(timeout=2) == {"type": "websocket.close", "code": 4403}
        nowhere = await websocket("/ws/billing/no-such-org/", outsider)
        await nowhere.connect()
        assert await nowhere.receive_output(timeout=2) == {"type": "websocket.close", "code": 4403}

    async def test_a_ledger_write_pushes_the_new_cards_and_bars(self, member, org):
        await database_sync_to_async(budget)(org, 100_000, public_id="bud_live")
        socket = await websocket("/ws/billing/acme/", member)
        assert (await socket.connect())[0]

        await database_sync_to_async(ledger.grant)(
            organization=org, amount_micros=5_000_000, idempotency_key="live-grant"
        )
        html = await _receive_until(socket, "$1,005.00")
        assert '<section id="billing-cards" class="cards" hx-swap-oob="true">' in html
        assert '<div id="billing-budgets" hx-swap-oob="true">' in html
        assert 'id="budget-bud_live"' in html
        await socket.disconnect()

    async def test_a_budget_written_by_an_admin_is_pushed_as_a_bar_and_its_removal_too(
        self, member, admin, org
    ):
        socket = await websocket("/ws/billing/acme/", member)
        assert (await socket.connect())[0]

        made = await database_sync_to_async(services.budget_create)(
            organization=org, created_by=admin, limit_micros=9_000_000, name="pushed"
        )
        html = await _receive_until(socket, f'id="budget-{made.public_id}"')
        assert "pushed" in html and "$9.00" in html
        await database_sync_to_async(services.budget_delete)(budget=made)
        html = await _receive_until(socket, '<div id="billing-budgets" hx-swap-oob="true">')
        assert made.public_id not in html and "No budgets yet." in html
        await socket.disconnect()

    async def test_bursts_coalesce_and_end_on_the_truth(self, member, org):
        socket = await websocket("/ws/billing/acme/", member)
        assert (await socket.connect())[0]

        for n in range(10):
            await database_sync_to_async(ledger.grant)(
                organization=org, amount_micros=1_000_000, idempotency_key=f"burst-{n}"
            )
        await _receive_until(socket, "$1,010.00")
        messages = 1
        while not await socket.receive_nothing(timeout=0.8):
            await socket.receive_from()
            messages += 1
        assert messages < 10
        await socket.disconnect()

    async def test_a_budget_notice_is_added_to_the_list(self, member, org, cpu_offer, hold):
        attempt = await database_sync_to_async(hold)(cpu_offer)
        await database_sync_to_async(budget)(org, 100_000, public_id="bud_n")
        socket = await websocket("/ws/billing/acme/", member)
        assert (await socket.connect())[0]

        await database_sync_to_async(bill)(attempt, 30)
        await database_sync_to_async(budgets.evaluate)()
        html = await _receive_until(socket, "budget-notice")
        assert html.startswith('<div hx-swap-oob="afterbegin:#budget-notices"><li id="notice-')
        assert "<strong>50%</strong>" in html
        await socket.disconnect()

    async def test_the_sessions_organization_is_used_without_one_in_the_path(self, member, org):
        socket = await websocket("/ws/billing/", member)
        assert (await socket.connect())[0]  # no org remembered: the first membership's
        await database_sync_to_async(ledger.grant)(
            organization=org, amount_micros=1_000_000, idempotency_key="session-grant"
        )
        assert "$1,001.00" in await _receive_until(socket, "$1,001.00")
        await socket.disconnect()

    async def test_a_removed_member_is_closed_4403_at_the_next_push(self, member, org, settings):
        settings.WS_REAUTH_INTERVAL_S = 0
        socket = await websocket("/ws/billing/acme/", member)
        assert (await socket.connect())[0]

        def remove():
            account_services.membership_remove(
                membership=Membership.objects.get(user=member, organization=org)
            )

        await database_sync_to_async(remove)()
        await database_sync_to_async(ledger.grant)(
            organization=org, amount_micros=1_000_000, idempotency_key="after-removal"
        )
        assert await socket.receive_output(timeout=5) == {"type": "websocket.close", "code": 4403}
        await socket.disconnect()

    async def test_nothing_is_sent_to_an_organization_nobody_watches(self, member, org):
        assert not await database_sync_to_async(watched)(billing_group(org.pk))
        socket = await websocket("/ws/billing/acme/", member)
        assert (await socket.connect())[0]
        assert await database_sync_to_async(watched)(billing_group(org.pk))
        await socket.disconnect()
        assert not await database_sync_to_async(watched)(billing_group(org.pk))
