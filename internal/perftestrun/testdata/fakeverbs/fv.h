/* fv.h: the flat structs that cross between abi.c (the libibverbs ABI) and
 * the Go side (verbs.go). Declarations only: the Go file's preamble
 * includes it, and a preamble next to //export may not define anything. */
#ifndef FV_H
#define FV_H
#include <stddef.h>
#include <stdint.h>
#include <infiniband/verbs.h>

struct fv_wc {
	uint64_t wr_id;
	uint32_t status, opcode, byte_len, imm, qp_num, src_qp, flags;
};

struct fv_cap {
	uint32_t max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data;
};

/* A send WR, its union read (rdma or atomic) by opcode. */
struct fv_swr {
	uint64_t wr_id;
	struct ibv_sge *sg;
	uint32_t num_sge, opcode, flags, imm; /* imm in host order */
	uint64_t raddr, compare_add, swap;
	uint32_t rkey;
};

struct fv_rwr {
	uint64_t wr_id;
	struct ibv_sge *sg;
	uint32_t num_sge;
};

struct fv_qpattr {
	uint32_t state, cur_state, en_sqd_async_notify, access, pkey_index, port;
	uint32_t path_mtu, timeout, retry_cnt, rnr_retry, rq_psn, sq_psn;
	uint32_t max_rd_atomic, max_dest_rd_atomic, min_rnr_timer, dest_qp_num;
	uint32_t dlid, sl, sgid_index, hop_limit, ah_port;
	uint8_t dgid[16];
};

#endif
