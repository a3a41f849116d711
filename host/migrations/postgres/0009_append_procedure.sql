-- The MySQL dialect's append procedure (see migrations/mysql/0009): this
-- dialect appends in one statement without one, so nothing changes here.
SELECT 1;
