-- Nothing to undo (up.sql says why).
SELECT 1;
