-- Expand step (additive, no gate): the fenced append in one round trip.
-- MySQL and MariaDB have no data-modifying CTE, so the fence, the stream's
-- sequence bump and the insert run as one procedure call instead of five
-- statements (BEGIN, the fence's locking read, the bump, the insert, COMMIT).
-- It is the transactional path written once more on the server, lock for
-- lock: the lease row is read LOCK IN SHARE MODE, so a grant or a split
-- (which update that row) waits for the commit, exactly as before.
--
-- p_holder NULL: no fence (a standalone node). Answers one row `seq` when
-- the entry was inserted, and no result set when the fence did not pass
-- (nothing written). Any error, a duplicate request id (1062) included,
-- rolls back and reaches the caller unchanged, which then looks the
-- original entry up as it does after the transactional path.
--
-- A later change to the fence is a new procedure (chitin_append_v2) beside
-- this one: a node of the previous version keeps calling v1.
CREATE PROCEDURE chitin_append_v1(
    IN p_shard   VARCHAR(255) CHARACTER SET utf8mb4,
    IN p_holder  CHAR(36) CHARACTER SET utf8mb4,
    IN p_epoch   BIGINT,
    IN p_stream  VARCHAR(255) CHARACTER SET utf8mb4,
    IN p_request VARCHAR(255) CHARACTER SET utf8mb4,
    IN p_payload LONGBLOB
)
MODIFIES SQL DATA
SQL SECURITY INVOKER
proc: BEGIN
    DECLARE v_live INT DEFAULT 0;
    DECLARE v_seq BIGINT;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION
    BEGIN
        ROLLBACK;
        RESIGNAL;
    END;
    START TRANSACTION;
    IF p_holder IS NOT NULL THEN
        SELECT COUNT(*) INTO v_live FROM chitin_shard_leases l
         WHERE l.shard_id = p_shard COLLATE utf8mb4_bin
           AND l.holder = p_holder COLLATE utf8mb4_bin
           AND l.epoch = p_epoch
           AND CASE WHEN l.liveness_epoch IS NULL THEN l.expires_at
                    ELSE (SELECT n.lease_expires_at FROM chitin_nodes n
                           WHERE n.id = l.holder AND n.liveness_epoch = l.liveness_epoch AND n.state <> 'down')
               END > UTC_TIMESTAMP(6)
        LOCK IN SHARE MODE;
        IF v_live = 0 THEN
            ROLLBACK;
            LEAVE proc;
        END IF;
    END IF;
    INSERT INTO chitin_journal_streams (stream, last_seq) VALUES (p_stream, LAST_INSERT_ID(1))
        ON DUPLICATE KEY UPDATE last_seq = LAST_INSERT_ID(last_seq + 1);
    SET v_seq = LAST_INSERT_ID();
    INSERT INTO chitin_journal (stream, seq, request_id, payload, shard_id, epoch, committed_at)
        VALUES (p_stream, v_seq, p_request, p_payload, p_shard, p_epoch, UTC_TIMESTAMP(6));
    COMMIT;
    SELECT v_seq AS seq;
END proc
