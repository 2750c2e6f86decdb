"""The ledger's one writer: accounts, transfers, two-phase holds, balances and the audit.

Every transfer is written with its accounts' cached sums, in one transaction, with `F()`
updates. An idempotency key already used returns the transfer written under it and moves
nothing again, so a redelivered task or a retried request never counts twice (the database's
unique constraint decides, in the INSERT itself).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import IntegrityError, connection, transaction
from django.db.models import BigIntegerField, F, OuterRef, Q, Subquery, Sum, Value
from django.db.models.functions import Coalesce

from apps.accounts.models import Organization, User
from apps.billing import live
from apps.billing.models import Account, Transfer
from apps.core.transactions import after_commit, atomic_joining

Kind = Account.Kind
Code = Transfer.Code
State = Transfer.State


def accounts_for(organization_id: int) -> dict[str, Account]:
    """The organization's wallet, grants and usage accounts, created on first use."""
    found = {a.kind: a for a in Account.objects.filter(organization_id=organization_id)}
    for kind in Kind.values:
        if kind not in found:
            try:
                with transaction.atomic():
                    found[kind] = Account.objects.create(organization_id=organization_id, kind=kind)
            except IntegrityError:  # created by a concurrent first use
                found[kind] = Account.objects.get(organization_id=organization_id, kind=kind)
    return found


def lock_wallet(organization_id: int) -> Account:
    """The organization's wallet, its row locked until the transaction ends. Every check of
    the available balance followed by a hold takes this lock first."""
    wallet = (
        Account.objects.select_for_update(no_key=True)
        .filter(organization_id=organization_id, kind=Kind.WALLET)
        .first()
    )
    if wallet is None:
        accounts_for(organization_id)
        wallet = Account.objects.select_for_update(no_key=True).get(
            organization_id=organization_id, kind=Kind.WALLET
        )
    return wallet


def transfer(
    *,
    organization_id: int,
    debit: str,
    credit: str,
    amount_micros: int,
    code: str,
    idempotency_key: str,
    pending: bool = False,
    memo: str = "",
    **links,
) -> Transfer:
    """Move `amount_micros` (> 0) from the organization's `debit` account to its `credit`
    account, posted, or reserved when `pending`. `links`: project, job, attempt (or their
    `_id`s), created_by, minutes, minutes_to."""
    if amount_micros <= 0:
        raise ValueError("A transfer moves a positive amount.")
    accounts = accounts_for(organization_id)
    row = Transfer(
        debit_account=accounts[debit],
        credit_account=accounts[credit],
        amount_micros=amount_micros,
        code=code,
        state=State.PENDING if pending else State.POSTED,
        idempotency_key=idempotency_key,
        organization_id=organization_id,
        memo=memo[:500],
        **links,
    )
    # Inside a caller's transaction (a submit's hold), no savepoint: a duplicate key raises
    # nothing (`_insert_once`), so there is nothing to roll back to.
    with atomic_joining():
        if not _insert_once(row):
            return Transfer.objects.get(idempotency_key=idempotency_key)
        column = "pending" if pending else "posted"
        _add(accounts[debit].pk, f"{column}_debits", amount_micros)
        _add(accounts[credit].pk, f"{column}_credits", amount_micros)
        changed_on_commit(organization_id)
    return row


@dataclass(frozen=True)
class Posting:
    """One posted transfer of many (`transfer_many`)."""

    organization_id: int
    debit: str
    credit: str
    amount_micros: int
    code: str
    idempotency_key: str
    links: dict


def transfer_many(postings: list[Posting]) -> int:
    """`transfer` (posted) of each, in one transaction: one INSERT for every row (a key
    already used inserts and moves nothing, as `transfer`'s does) and one UPDATE per
    account moved, by what the inserted rows add up to. Returns how many were inserted."""
    if not postings:
        return 0
    accounts = {org: accounts_for(org) for org in {posting.organization_id for posting in postings}}
    rows = [
        Transfer(
            debit_account=accounts[posting.organization_id][posting.debit],
            credit_account=accounts[posting.organization_id][posting.credit],
            amount_micros=posting.amount_micros,
            code=posting.code,
            state=State.POSTED,
            idempotency_key=posting.idempotency_key,
            organization_id=posting.organization_id,
            **posting.links,
        )
        for posting in postings
    ]
    if any(posting.amount_micros <= 0 for posting in postings):
        raise ValueError("A transfer moves a positive amount.")
    with transaction.atomic():
        inserted = _insert_many(rows)
        moved: dict[tuple[int, str], int] = {}
        for row in rows:
            if row.idempotency_key in inserted:
                debit = (row.debit_account.pk, "posted_debits")
                credit = (row.credit_account.pk, "posted_credits")
                moved[debit] = moved.get(debit, 0) + row.amount_micros
                moved[credit] = moved.get(credit, 0) + row.amount_micros
        for (account_id, column), amount in sorted(moved.items()):
            _add(account_id, column, amount)
        for organization_id in sorted({row.organization_id for row in rows}):
            changed_on_commit(organization_id)
    return len(inserted)


def _insert_many(rows: list[Transfer]) -> set[str]:
    """`_insert_once` for many rows in one statement: the idempotency keys inserted."""
    fields = [f for f in Transfer._meta.concrete_fields if not f.primary_key]
    table = connection.ops.quote_name(Transfer._meta.db_table)
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    one = "(" + ", ".join(["%s"] * len(fields)) + ")"
    values = [
        f.get_db_prep_save(getattr(row, f.attname), connection) for row in rows for f in fields
    ]
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} ({columns}) VALUES {', '.join([one] * len(rows))} "
            "ON CONFLICT DO NOTHING RETURNING idempotency_key",
            values,
        )
        return {key for (key,) in cursor.fetchall()}


def resolve(hold: Transfer, *, post: bool, memo: str = "") -> Transfer:
    """Post or void a pending transfer, once: the resolution is a new transfer pointing at
    it (the unique `pending` link lets only one exist)."""
    if hold.state != State.PENDING:
        raise ValueError("Only a pending transfer can be posted or voided.")
    state = State.POSTED if post else State.VOIDED
    row = Transfer(
        debit_account_id=hold.debit_account_id,
        credit_account_id=hold.credit_account_id,
        amount_micros=hold.amount_micros,
        code=hold.code,
        state=state,
        pending=hold,
        idempotency_key=f"{state}:{hold.pk}",
        organization_id=hold.organization_id,
        project_id=hold.project_id,
        job_id=hold.job_id,
        memo=memo[:500],
    )
    # Inside a caller's transaction (a submit's hold), no savepoint: a duplicate key raises
    # nothing (`_insert_once`), so there is nothing to roll back to.
    with atomic_joining():
        if not _insert_once(row):  # settled already (posted or voided): that one stands
            return Transfer.objects.get(pending=hold)
        _add(hold.debit_account_id, "pending_debits", -hold.amount_micros)
        _add(hold.credit_account_id, "pending_credits", -hold.amount_micros)
        if post:
            _add(hold.debit_account_id, "posted_debits", hold.amount_micros)
            _add(hold.credit_account_id, "posted_credits", hold.amount_micros)
        changed_on_commit(hold.organization_id)
    return row


def _insert_once(row: Transfer) -> bool:
    """Insert `row` unless a transfer with its idempotency key (or, for a resolution, one
    settling the same pending transfer) exists: one statement, `INSERT ... ON CONFLICT DO
    NOTHING`, so a duplicate neither raises nor needs a savepoint. True when inserted."""
    fields = [f for f in Transfer._meta.concrete_fields if not f.primary_key]
    table = connection.ops.quote_name(Transfer._meta.db_table)
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    values = [f.get_db_prep_save(getattr(row, f.attname), connection) for f in fields]
    placeholders = ", ".join(["%s"] * len(fields))
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} ({columns}) VALUES ({placeholders}) "
            "ON CONFLICT DO NOTHING RETURNING id",
            values,
        )
        inserted = cursor.fetchone()
    if inserted is None:
        return False
    row.pk = inserted[0]
    row._state.adding = False
    return True


def _add(account_id: int, column: str, amount: int) -> None:
    Account.objects.filter(pk=account_id).update(**{column: F(column) + amount})


def grant(
    *,
    organization: Organization,
    amount_micros: int,
    idempotency_key: str,
    created_by: User | None = None,
    memo: str = "",
) -> Transfer:
    """Credit an organization's wallet (an operator's grant or a purchase)."""
    return transfer(
        organization_id=organization.pk,
        debit=Kind.GRANTS,
        credit=Kind.WALLET,
        amount_micros=amount_micros,
        code=Code.GRANT,
        idempotency_key=idempotency_key,
        created_by=created_by,
        memo=memo,
    )


@dataclass(frozen=True)
class Balance:
    balance_micros: int
    held_micros: int

    @property
    def available_micros(self) -> int:
        return self.balance_micros - self.held_micros


def balance(organization_id: int) -> Balance:
    """The wallet's posted balance and what pending holds reserve of it."""
    wallet = Account.objects.filter(organization_id=organization_id, kind=Kind.WALLET).first()
    if wallet is None:
        return Balance(0, 0)
    return Balance(wallet.balance_micros, wallet.pending_debits)


def balances(organization_ids) -> dict[int, Balance]:
    """`balance` of each of the organizations, in one query."""
    ids = set(organization_ids)
    found = {
        wallet.organization_id: Balance(wallet.balance_micros, wallet.pending_debits)
        for wallet in Account.objects.filter(organization_id__in=ids, kind=Kind.WALLET)
    }
    return {organization_id: found.get(organization_id, Balance(0, 0)) for organization_id in ids}


# -- the audit ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Mismatch:
    account_id: int
    column: str
    cached: int
    recomputed: int


COLUMNS = ("posted_debits", "posted_credits", "pending_debits", "pending_credits")


def _recomputed(column: str) -> Coalesce:
    """An account's `column` summed from its transfers (pending ones count until a
    resolution exists; a posted resolution counts as posted), as a subquery."""
    name, side = column.removesuffix("s").split("_")
    condition = (
        Q(state=State.POSTED)
        if name == "posted"
        else Q(state=State.PENDING, resolution__isnull=True)
    )
    total = (
        Transfer.objects.filter(condition, **{f"{side}_account_id": OuterRef("pk")})
        .order_by()
        .values(f"{side}_account_id")
        .annotate(total=Sum("amount_micros"))
        .values("total")
    )
    return Coalesce(Subquery(total), Value(0), output_field=BigIntegerField())


def _with_recomputed(account_ids: list[int] | None = None):
    """Accounts with their cached sums and, as `recomputed_<column>`, the sums from the
    transfers: one query, however many accounts."""
    accounts = Account.objects.all()
    if account_ids is not None:
        accounts = accounts.filter(pk__in=account_ids)
    recomputed = {f"recomputed_{column}": _recomputed(column) for column in COLUMNS}
    return accounts.annotate(**recomputed).values("pk", *COLUMNS, *recomputed).order_by("pk")


def recompute(account_ids: list[int] | None = None) -> dict[int, dict[str, int]]:
    """Every account's four sums recomputed from the transfers."""
    return {
        row["pk"]: {column: row[f"recomputed_{column}"] for column in COLUMNS}
        for row in _with_recomputed(account_ids)
    }


def audit() -> list[Mismatch]:
    """Compare every account's cached sums with the transfers; return each difference."""
    return [
        Mismatch(row["pk"], column, row[column], row[f"recomputed_{column}"])
        for row in _with_recomputed()
        for column in COLUMNS
        if row[column] != row[f"recomputed_{column}"]
    ]


def total_balance() -> int:
    """The sum over every account of credits minus debits: zero in a balanced ledger."""
    sums = Account.objects.aggregate(credits=Sum("posted_credits"), debits=Sum("posted_debits"))
    return (sums["credits"] or 0) - (sums["debits"] or 0)


def changed_on_commit(organization_id: int) -> None:
    """Tell the organization's Billing pages that its balance moved, after commit."""
    after_commit(live.balance_changed, organization_id)
