"""Django's PostgreSQL backend, its connection pool checking each connection with
`check_and_sweep` (config/db_pool.py) instead of the plain empty query.

Django builds the pool itself and passes `check` from CONN_HEALTH_CHECKS, so the option
cannot come through OPTIONS["pool"]; this backend builds the same pool with our check. Set
as ENGINE by config/settings.py when the pool is on."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured
from django.db.backends.base.base import NO_DB_ALIAS
from django.db.backends.postgresql import base
from psycopg_pool import ConnectionPool

from config.db_pool import check_and_sweep


class DatabaseWrapper(base.DatabaseWrapper):
    @property
    def pool(self) -> ConnectionPool | None:
        pool_options = self.settings_dict["OPTIONS"].get("pool")
        if self.alias == NO_DB_ALIAS or not pool_options:
            return None
        if self.alias not in self._connection_pools:
            if self.settings_dict.get("CONN_MAX_AGE", 0) != 0:
                raise ImproperlyConfigured("Pooling doesn't support persistent connections.")
            connect_kwargs = self.get_connection_params()
            connect_kwargs["autocommit"] = True  # as Django's: it sets autocommit itself later
            pool = ConnectionPool(
                kwargs=connect_kwargs,
                open=False,
                configure=self._configure_connection,
                check=check_and_sweep,
                **({} if pool_options is True else pool_options),
            )
            # As Django's: threads racing at startup each build one; the first stored wins.
            self._connection_pools.setdefault(self.alias, pool)
        return self._connection_pools[self.alias]
