-- The firing loop claims each row of cron_jobs shortly after it was inserted (claimed_by, claimed_until,
-- claim_token: no index has them). With full pages the claimed version lands on another page and all three
-- indexes of the table (the key, cron_jobs_due, cron_jobs_agent_id_one_time) get an entry for it: measured, 94 %
-- of claims were such updates, five WAL records and about 15 µs of PostgreSQL's time a fire, two thirds of the
-- firing loop's time in the database. With 60 % of each page left free every row's claimed version fits beside it
-- on its page (at 50 % a third still did not, at 70 % two thirds), so the claim is a HOT update: one WAL record, no
-- index entry. The cost is room: pages of cron_jobs hold 40 % of the rows they would (docs/benchmarks.md, "Cron on
-- PostgreSQL: the claim kept on its page"). Applies to pages written from now on. PostgreSQL only: SQLite rewrites
-- a row in place.
ALTER TABLE cron_jobs SET (fillfactor = 40);
