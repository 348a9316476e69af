"""Use cases: each service owns one use case and its transactions.

Entry points (cli/, handlers/, runner/) parse their input and call a service; services
call the db/ query functions inside `Database.transaction()` and the k8s/ API calls,
and apply the pure rules of domain/.
"""
