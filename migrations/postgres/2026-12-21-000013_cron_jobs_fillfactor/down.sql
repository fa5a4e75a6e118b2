ALTER TABLE cron_jobs RESET (fillfactor);
