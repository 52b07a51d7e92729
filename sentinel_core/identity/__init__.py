"""Who a request is: validated JWT tenants, anonymous device cookie AND network, and the
hashed bucket keys built from them. Raw identities never leave this folder.

May import: `sentinel_core._models`, `sentinel_core.errors`, `sentinel_core.config`
(the sections it is built from).
"""
