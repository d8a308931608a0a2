/* abi.c: the libibverbs ABI of libibexverbs.so, a stand-in libibverbs that
 * perftest loads with LD_PRELOAD. It keeps the ABI of
 * perf/oob/testdata/fakeverbs (the symbols and versions of libibverbs.map,
 * ibv_query_port's compat signature, _ibv_query_gid_ex, the reg_mr
 * variants, the ops table in ibv_context with abi_compat NULL so that the
 * inline helpers call the plain ops) and hands every verb to ibex's verbs
 * package on a real ibex device (verbs.go). Each C object embeds the
 * handle of its Go object; no Go pointer is ever stored here. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <signal.h>
#include "fv.h"
#include "_cgo_export.h"

#define TRACE(...) do { if (getenv("FAKEVERBS_TRACE")) fprintf(stderr, "fakeverbs: " __VA_ARGS__); } while (0)
#define FV_BATCH 32
#define FV_MAX_INLINE 512

struct xctx { struct ibv_context c; uintptr_t h; };
struct xpd { struct ibv_pd pd; uintptr_t h; };
struct xmr { struct ibv_mr mr; uintptr_t h; };
struct xch { struct ibv_comp_channel ch; uintptr_t h; };
struct xcq { struct ibv_cq cq; uintptr_t h; };
struct xqp { struct ibv_qp qp; uintptr_t h; struct ibv_qp_cap cap; int sq_sig_all; };

static struct ibv_device dev;
static struct ibv_device *list[2];

static const char *dev_name(void)
{
	const char *s = getenv("FAKEVERBS_DEVICE");
	return s && *s ? s : "udp0";
}

static void *fail_ptr(int err)
{
	errno = err;
	return NULL;
}

/* ---- data path (the ops table) ---- */

static int x_poll_cq(struct ibv_cq *c, int num, struct ibv_wc *wc)
{
	struct fv_wc flat[FV_BATCH];
	int total = 0;
	if (num < 0 || (num > 0 && !wc))
		return -EINVAL;
	while (total < num) {
		int want = num - total < FV_BATCH ? num - total : FV_BATCH;
		int n = fvPollCQ(((struct xcq *)c)->h, want, flat);
		if (n < 0)
			return total ? total : n;
		for (int i = 0; i < n; i++) {
			struct ibv_wc *w = &wc[total + i];
			memset(w, 0, sizeof(*w));
			w->wr_id = flat[i].wr_id;
			w->status = flat[i].status;
			w->opcode = flat[i].opcode;
			w->byte_len = flat[i].byte_len;
			w->imm_data = htonl(flat[i].imm);
			w->qp_num = flat[i].qp_num;
			w->src_qp = flat[i].src_qp;
			w->wc_flags = flat[i].flags;
		}
		total += n;
		if (n < want)
			break;
	}
	return total;
}

static int x_req_notify_cq(struct ibv_cq *c, int solicited)
{
	return fvArmCQ(((struct xcq *)c)->h, solicited);
}

static int x_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct fv_swr flat[FV_BATCH];
	static __thread char inl[FV_BATCH][FV_MAX_INLINE];
	uintptr_t h = ((struct xqp *)qp)->h;
	while (wr) {
		struct ibv_send_wr *start = wr;
		int n = 0, posted = 0, rc;
		for (; wr && n < FV_BATCH; wr = wr->next, n++) {
			struct fv_swr *f = &flat[n];
			memset(f, 0, sizeof(*f));
			f->wr_id = wr->wr_id;
			f->opcode = wr->opcode;
			f->flags = wr->send_flags;
			f->imm = ntohl(wr->imm_data);
			f->num_sge = wr->num_sge < 0 ? 0 : wr->num_sge;
			f->sg = wr->sg_list;
			if (wr->num_sge < 0 || (wr->num_sge > 0 && !wr->sg_list)) {
				TRACE("post_send: wr %#llx: num_sge %d with sg_list %p\n", (unsigned long long)wr->wr_id, wr->num_sge, (void *)wr->sg_list);
				rc = EINVAL;
				goto bad;
			}
			switch (wr->opcode) {
			case IBV_WR_RDMA_WRITE: case IBV_WR_RDMA_WRITE_WITH_IMM: case IBV_WR_RDMA_READ:
				f->raddr = wr->wr.rdma.remote_addr;
				f->rkey = wr->wr.rdma.rkey;
				break;
			case IBV_WR_ATOMIC_CMP_AND_SWP: case IBV_WR_ATOMIC_FETCH_AND_ADD:
				f->raddr = wr->wr.atomic.remote_addr;
				f->rkey = wr->wr.atomic.rkey;
				f->compare_add = wr->wr.atomic.compare_add;
				f->swap = wr->wr.atomic.swap;
				break;
			default:
				break;
			}
			if (wr->send_flags & IBV_SEND_INLINE) {
				/* Inline SGEs name plain memory, not an MR: copy it now, as the
				 * verb promises, and hand Go the one copy. */
				uint32_t len = 0;
				for (int i = 0; i < wr->num_sge; i++) {
					uint32_t l = wr->sg_list[i].length;
					if (len + l > FV_MAX_INLINE) {
						TRACE("post_send: wr %#llx: inline payload over %d bytes\n", (unsigned long long)wr->wr_id, FV_MAX_INLINE);
						rc = EINVAL;
						goto bad;
					}
					if (l)
						memcpy(inl[n] + len, (void *)(uintptr_t)wr->sg_list[i].addr, l);
					len += l;
				}
				f->sg = (struct ibv_sge *)(void *)inl[n];
				f->num_sge = len; /* with IBV_SEND_INLINE: the byte count at sg */
			}
		}
		rc = fvPostSend(h, flat, n, &posted);
		if (rc) {
			wr = start;
			for (int i = 0; i < posted && wr; i++)
				wr = wr->next;
			if (bad)
				*bad = wr;
			return rc;
		}
		continue;
	bad:
		if (n > 0) { /* post what came before the bad one */
			int prc = fvPostSend(h, flat, n, &posted);
			if (prc) {
				wr = start;
				for (int i = 0; i < posted && wr; i++)
					wr = wr->next;
				rc = prc;
			}
		}
		if (bad)
			*bad = wr;
		return rc;
	}
	return 0;
}

static int x_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct fv_rwr flat[FV_BATCH];
	uintptr_t h = ((struct xqp *)qp)->h;
	while (wr) {
		struct ibv_recv_wr *start = wr;
		int n = 0, posted = 0, rc = 0;
		for (; wr && n < FV_BATCH; wr = wr->next, n++) {
			if (wr->num_sge < 0 || (wr->num_sge > 0 && !wr->sg_list)) {
				TRACE("post_recv: wr %#llx: num_sge %d with sg_list %p\n", (unsigned long long)wr->wr_id, wr->num_sge, (void *)wr->sg_list);
				rc = EINVAL;
				break;
			}
			flat[n].wr_id = wr->wr_id;
			flat[n].sg = wr->sg_list;
			flat[n].num_sge = wr->num_sge;
		}
		if (n > 0) {
			int prc = fvPostRecv(h, flat, n, &posted);
			if (prc) {
				wr = start;
				for (int i = 0; i < posted && wr; i++)
					wr = wr->next;
				rc = prc;
			}
		}
		if (rc) {
			if (bad)
				*bad = wr;
			return rc;
		}
	}
	return 0;
}

/* ---- devices ---- */

struct ibv_device **ibv_get_device_list(int *n)
{
	const char *name = dev_name();
	int have = fvHasDevice((char *)name);
	if (!have)
		fprintf(stderr, "fakeverbs: ibex has no device %s (FAKEVERBS_DEVICE)\n", name);
	snprintf(dev.name, sizeof(dev.name), "%s", name);
	strcpy(dev.dev_name, "uverbs0");
	strcpy(dev.dev_path, "/nonexistent/uverbs0");
	snprintf(dev.ibdev_path, sizeof(dev.ibdev_path), "/nonexistent/%s", name);
	dev.node_type = IBV_NODE_CA;
	dev.transport_type = IBV_TRANSPORT_IB;
	list[0] = have ? &dev : NULL;
	list[1] = NULL;
	if (n)
		*n = have;
	return list;
}

void ibv_free_device_list(struct ibv_device **l) { (void)l; }
const char *ibv_get_device_name(struct ibv_device *d) { return d ? d->name : NULL; }
__be64 ibv_get_device_guid(struct ibv_device *d) { (void)d; return htobe64(0x6962657800000002ULL); }

struct ibv_context *ibv_open_device(struct ibv_device *d)
{
	if (!d)
		return fail_ptr(EINVAL);
	struct xctx *x = calloc(1, sizeof(*x));
	if (!x)
		return fail_ptr(ENOMEM);
	int rc = fvOpen(d->name, &x->h);
	if (rc) {
		free(x);
		return fail_ptr(rc);
	}
	struct ibv_context *c = &x->c;
	c->device = d;
	c->cmd_fd = -1;
	c->async_fd = -1;
	c->num_comp_vectors = 1;
	pthread_mutex_init(&c->mutex, NULL);
	c->abi_compat = NULL; /* not extended: the inline helpers fall back to the plain calls */
	c->ops.poll_cq = x_poll_cq;
	c->ops.req_notify_cq = x_req_notify_cq;
	c->ops.post_send = x_post_send;
	c->ops.post_recv = x_post_recv;
	TRACE("open_device %s\n", d->name);
	return c;
}

int ibv_close_device(struct ibv_context *c)
{
	if (!c)
		return EINVAL;
	struct xctx *x = (struct xctx *)c;
	int rc = fvDestroy(x->h);
	if (!rc)
		free(x);
	return rc;
}

int ibv_query_device(struct ibv_context *c, struct ibv_device_attr *a)
{
	if (!c || !a)
		return EINVAL;
	return fvQueryDevice(((struct xctx *)c)->h, a);
}

int (ibv_query_port)(struct ibv_context *c, uint8_t port, struct _compat_ibv_port_attr *pa)
{
	if (!c || !pa)
		return EINVAL;
	/* The caller passes a whole ibv_port_attr (the inline ibv_query_port
	 * clears it and calls here). */
	return fvQueryPort(((struct xctx *)c)->h, port, (struct ibv_port_attr *)pa);
}

int ibv_query_gid(struct ibv_context *c, uint8_t port, int index, union ibv_gid *g)
{
	if (!c || !g)
		return EINVAL;
	int rc = fvQueryGID(((struct xctx *)c)->h, port, index, g->raw);
	return rc ? -1 : 0;
}

int _ibv_query_gid_ex(struct ibv_context *c, uint32_t port, uint32_t index, struct ibv_gid_entry *e, uint32_t flags, size_t sz)
{
	(void)flags;
	if (!c || !e || sz < sizeof(*e))
		return EINVAL;
	memset(e, 0, sz);
	int rc = fvQueryGID(((struct xctx *)c)->h, port > 255 ? 0 : port, index > 0x7fffffff ? -1 : (int)index, e->gid.raw);
	if (rc)
		return rc;
	e->gid_index = index;
	e->port_num = port;
	e->gid_type = IBV_GID_TYPE_ROCE_V2;
	return 0;
}

int ibv_query_pkey(struct ibv_context *c, uint8_t port, int index, __be16 *pkey)
{
	if (!c || !pkey || port != 1 || index != 0)
		return -1;
	*pkey = htons(0xffff);
	return 0;
}

/* ---- PDs and MRs ---- */

struct ibv_pd *ibv_alloc_pd(struct ibv_context *c)
{
	if (!c)
		return fail_ptr(EINVAL);
	struct xpd *x = calloc(1, sizeof(*x));
	if (!x)
		return fail_ptr(ENOMEM);
	int rc = fvAllocPD(((struct xctx *)c)->h, &x->h);
	if (rc) {
		free(x);
		return fail_ptr(rc);
	}
	x->pd.context = c;
	x->pd.handle = (uint32_t)x->h;
	return &x->pd;
}

int ibv_dealloc_pd(struct ibv_pd *pd)
{
	if (!pd)
		return EINVAL;
	struct xpd *x = (struct xpd *)pd;
	int rc = fvDestroy(x->h);
	if (!rc)
		free(x);
	return rc;
}

struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova, unsigned int access)
{
	if (!pd)
		return fail_ptr(EINVAL);
	struct xmr *x = calloc(1, sizeof(*x));
	if (!x)
		return fail_ptr(ENOMEM);
	uint32_t lkey = 0, rkey = 0;
	/* Optional access flags (relaxed ordering) are hints a device may ignore. */
	int rc = fvRegMR(((struct xpd *)pd)->h, addr, len, iova, access & ~IBV_ACCESS_OPTIONAL_RANGE, &x->h, &lkey, &rkey);
	if (rc) {
		free(x);
		return fail_ptr(rc);
	}
	x->mr.context = pd->context;
	x->mr.pd = pd;
	x->mr.addr = addr;
	x->mr.length = len;
	x->mr.handle = (uint32_t)x->h;
	x->mr.lkey = lkey;
	x->mr.rkey = rkey;
	TRACE("reg_mr %p %zu access %#x lkey %#x rkey %#x\n", addr, len, access, lkey, rkey);
	return &x->mr;
}

struct ibv_mr *(ibv_reg_mr)(struct ibv_pd *pd, void *addr, size_t len, int access)
{
	return ibv_reg_mr_iova2(pd, addr, len, (uintptr_t)addr, access);
}

struct ibv_mr *(ibv_reg_mr_iova)(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova, int access)
{
	return ibv_reg_mr_iova2(pd, addr, len, iova, access);
}

int ibv_dereg_mr(struct ibv_mr *mr)
{
	if (!mr)
		return EINVAL;
	struct xmr *x = (struct xmr *)mr;
	int rc = fvDestroy(x->h);
	if (!rc)
		free(x);
	return rc;
}

/* ---- CQs and completion channels ---- */

struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *c)
{
	if (!c)
		return fail_ptr(EINVAL);
	struct xch *x = calloc(1, sizeof(*x));
	if (!x)
		return fail_ptr(ENOMEM);
	int rc = fvCreateChannel(((struct xctx *)c)->h, &x->h);
	if (rc) {
		free(x);
		return fail_ptr(rc);
	}
	x->ch.context = c;
	x->ch.fd = -1; /* no file descriptor: ibv_get_cq_event blocks in ibex */
	return &x->ch;
}

int ibv_destroy_comp_channel(struct ibv_comp_channel *ch)
{
	if (!ch)
		return EINVAL;
	struct xch *x = (struct xch *)ch;
	int rc = fvDestroy(x->h);
	if (!rc)
		free(x);
	return rc;
}

struct ibv_cq *ibv_create_cq(struct ibv_context *c, int cqe, void *cq_context, struct ibv_comp_channel *ch, int vec)
{
	(void)vec;
	if (!c)
		return fail_ptr(EINVAL);
	struct xcq *x = calloc(1, sizeof(*x));
	if (!x)
		return fail_ptr(ENOMEM);
	int actual = 0;
	int rc = fvCreateCQ(((struct xctx *)c)->h, cqe, ch ? ((struct xch *)ch)->h : 0, &x->cq, &x->h, &actual);
	if (rc) {
		free(x);
		return fail_ptr(rc);
	}
	x->cq.context = c;
	x->cq.channel = ch;
	x->cq.cq_context = cq_context;
	x->cq.cqe = actual;
	x->cq.handle = (uint32_t)x->h;
	pthread_mutex_init(&x->cq.mutex, NULL);
	pthread_cond_init(&x->cq.cond, NULL);
	TRACE("create_cq %d (holds %d)\n", cqe, actual);
	return &x->cq;
}

int ibv_destroy_cq(struct ibv_cq *c)
{
	if (!c)
		return EINVAL;
	struct xcq *x = (struct xcq *)c;
	int rc = fvDestroy(x->h);
	if (!rc)
		free(x);
	return rc;
}

int ibv_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **ctx)
{
	if (!ch || !cq || !ctx) {
		errno = EINVAL;
		return -1;
	}
	void *got = NULL;
	int rc = fvGetCQEvent(((struct xch *)ch)->h, &got);
	if (rc) {
		errno = rc;
		return -1;
	}
	*cq = got;
	*ctx = (*cq)->cq_context;
	return 0;
}

void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int n) { (void)cq; (void)n; }

/* ---- QPs ---- */

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *ia)
{
	if (!pd || !ia || !ia->send_cq || !ia->recv_cq)
		return fail_ptr(EINVAL);
	if (ia->qp_type != IBV_QPT_RC) {
		fprintf(stderr, "fakeverbs: create_qp: QP type %d is not supported: ibex implements RC only\n", ia->qp_type);
		return fail_ptr(EOPNOTSUPP);
	}
	if (ia->srq) {
		fprintf(stderr, "fakeverbs: create_qp: SRQs are not supported\n");
		return fail_ptr(EOPNOTSUPP);
	}
	struct xqp *x = calloc(1, sizeof(*x));
	if (!x)
		return fail_ptr(ENOMEM);
	struct fv_cap cap = {
		ia->cap.max_send_wr, ia->cap.max_recv_wr, ia->cap.max_send_sge, ia->cap.max_recv_sge, ia->cap.max_inline_data,
	};
	uint32_t qpn = 0;
	int rc = fvCreateQP(((struct xpd *)pd)->h, ((struct xcq *)ia->send_cq)->h, ((struct xcq *)ia->recv_cq)->h,
		ia->sq_sig_all, &cap, &x->h, &qpn);
	if (rc) {
		free(x);
		return fail_ptr(rc);
	}
	ia->cap.max_send_wr = cap.max_send_wr;
	ia->cap.max_recv_wr = cap.max_recv_wr;
	ia->cap.max_send_sge = cap.max_send_sge;
	ia->cap.max_recv_sge = cap.max_recv_sge;
	ia->cap.max_inline_data = cap.max_inline_data;
	x->cap = ia->cap;
	x->sq_sig_all = ia->sq_sig_all;
	struct ibv_qp *qp = &x->qp;
	qp->context = pd->context;
	qp->qp_context = ia->qp_context;
	qp->pd = pd;
	qp->send_cq = ia->send_cq;
	qp->recv_cq = ia->recv_cq;
	qp->handle = (uint32_t)x->h;
	qp->qp_num = qpn;
	qp->state = IBV_QPS_RESET;
	qp->qp_type = ia->qp_type;
	pthread_mutex_init(&qp->mutex, NULL);
	pthread_cond_init(&qp->cond, NULL);
	TRACE("create_qp qpn %#x send_wr %u recv_wr %u inline %u\n", qpn, cap.max_send_wr, cap.max_recv_wr, cap.max_inline_data);
	return qp;
}

int ibv_destroy_qp(struct ibv_qp *qp)
{
	if (!qp)
		return EINVAL;
	struct xqp *x = (struct xqp *)qp;
	int rc = fvDestroy(x->h);
	if (!rc)
		free(x);
	return rc;
}

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask)
{
	if (!qp || !a)
		return EINVAL;
	struct fv_qpattr f = {
		.state = a->qp_state, .cur_state = a->cur_qp_state, .en_sqd_async_notify = a->en_sqd_async_notify,
		.access = a->qp_access_flags, .pkey_index = a->pkey_index, .port = a->port_num,
		.path_mtu = a->path_mtu, .timeout = a->timeout, .retry_cnt = a->retry_cnt, .rnr_retry = a->rnr_retry,
		.rq_psn = a->rq_psn, .sq_psn = a->sq_psn, .max_rd_atomic = a->max_rd_atomic,
		.max_dest_rd_atomic = a->max_dest_rd_atomic, .min_rnr_timer = a->min_rnr_timer,
		.dest_qp_num = a->dest_qp_num, .dlid = a->ah_attr.dlid, .sl = a->ah_attr.sl,
		.sgid_index = a->ah_attr.grh.sgid_index, .hop_limit = a->ah_attr.grh.hop_limit, .ah_port = a->ah_attr.port_num,
	};
	memcpy(f.dgid, a->ah_attr.grh.dgid.raw, 16);
	TRACE("modify_qp %#x state %d mask %#x\n", qp->qp_num, a->qp_state, mask);
	int rc = fvModifyQP(((struct xqp *)qp)->h, &f, mask);
	if (!rc && (mask & IBV_QP_STATE))
		qp->state = a->qp_state;
	return rc;
}

int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask, struct ibv_qp_init_attr *ia)
{
	(void)mask;
	if (!qp || !a)
		return EINVAL;
	struct xqp *x = (struct xqp *)qp;
	struct fv_qpattr f;
	memset(&f, 0, sizeof(f));
	int rc = fvQueryQP(x->h, &f);
	if (rc)
		return rc;
	memset(a, 0, sizeof(*a));
	a->qp_state = f.state;
	a->cur_qp_state = f.cur_state;
	a->path_mtu = f.path_mtu;
	a->qp_access_flags = f.access;
	a->pkey_index = f.pkey_index;
	a->port_num = f.port;
	a->timeout = f.timeout;
	a->retry_cnt = f.retry_cnt;
	a->rnr_retry = f.rnr_retry;
	a->rq_psn = f.rq_psn;
	a->sq_psn = f.sq_psn;
	a->max_rd_atomic = f.max_rd_atomic;
	a->max_dest_rd_atomic = f.max_dest_rd_atomic;
	a->min_rnr_timer = f.min_rnr_timer;
	a->dest_qp_num = f.dest_qp_num;
	a->ah_attr.dlid = f.dlid;
	a->ah_attr.sl = f.sl;
	a->ah_attr.is_global = 1;
	a->ah_attr.port_num = f.ah_port;
	a->ah_attr.grh.sgid_index = f.sgid_index;
	a->ah_attr.grh.hop_limit = f.hop_limit;
	memcpy(a->ah_attr.grh.dgid.raw, f.dgid, 16);
	a->cap = x->cap;
	if (ia) {
		memset(ia, 0, sizeof(*ia));
		ia->qp_context = qp->qp_context;
		ia->send_cq = qp->send_cq;
		ia->recv_cq = qp->recv_cq;
		ia->qp_type = qp->qp_type;
		ia->cap = x->cap;
		ia->sq_sig_all = x->sq_sig_all;
	}
	return 0;
}

struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
	(void)qp;
	fprintf(stderr, "fakeverbs: ibv_qp_to_qp_ex is not supported; run perftest with --use_old_post_send\n");
	return fail_ptr(EOPNOTSUPP);
}

/* ---- not supported: SRQs, address handles (UD), multicast ---- */

struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *ia)
{
	(void)pd; (void)ia;
	fprintf(stderr, "fakeverbs: create_srq: SRQs are not supported\n");
	return fail_ptr(EOPNOTSUPP);
}

int ibv_destroy_srq(struct ibv_srq *s) { (void)s; return EINVAL; }

struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *a)
{
	(void)pd; (void)a;
	fprintf(stderr, "fakeverbs: create_ah: address handles (UD) are not supported\n");
	return fail_ptr(EOPNOTSUPP);
}

struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc, struct ibv_grh *grh, uint8_t port)
{
	(void)wc; (void)grh; (void)port;
	return ibv_create_ah(pd, NULL);
}

int ibv_destroy_ah(struct ibv_ah *ah) { (void)ah; return EINVAL; }
int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid) { (void)qp; (void)gid; (void)lid; return EOPNOTSUPP; }
int ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid) { (void)qp; (void)gid; (void)lid; return EOPNOTSUPP; }

/* perftest installs its SIGALRM handlers (catch_alarm for -D, check_alive)
 * with signal(), which does not set SA_ONSTACK. In this library the Go
 * runtime runs threads of its own and runs Go code on perftest's thread
 * during every verb, so a handler without SA_ONSTACK can run on a
 * goroutine's small stack and corrupt it: seen as a SIGSEGV with a broken
 * traceback in udp's progress goroutine under ib_send_bw -D 1. The cgo
 * documentation asks C code for SA_ONSTACK; this signal() adds it. It
 * interposes glibc's, under glibc's version (libibverbs.map), so that
 * perftest's signal@GLIBC_2.2.5 binds here. */
__sighandler_t signal(int sig, __sighandler_t handler)
{
	struct sigaction sa, old;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = handler;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_ONSTACK | SA_RESTART; /* glibc's signal(): BSD semantics */
	if (sigaction(sig, &sa, &old) < 0)
		return SIG_ERR;
	return old.sa_handler;
}
