/* fakeverbs: a stand-in libibverbs for running perftest's control path with
 * no RDMA device. One device, "fake0", RoCE port 1; verbs objects are plain
 * memory; every signalled send completes at once; every posted receive
 * completes at once. No data moves. Written for perf/oob's interop test. */
#define _GNU_SOURCE
#include <infiniband/verbs.h>
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#define TRACE(...) do { if (getenv("FAKEVERBS_TRACE")) fprintf(stderr, "fakeverbs: " __VA_ARGS__); } while (0)

struct fcq {
	struct ibv_cq cq;
	struct ibv_wc *wc;
	int head, n, cap;
	pthread_mutex_t mu;
};

struct fqp {
	struct ibv_qp qp;
	struct ibv_qp_attr attr;
};

static struct ibv_device dev;
static struct ibv_device *list[2];
static uint32_t next_qpn = 0x11, next_key = 0x100;

static void cq_push(struct ibv_cq *c, uint64_t wr_id, enum ibv_wc_opcode op, uint32_t len, uint32_t qpn)
{
	struct fcq *f = (struct fcq *)c;
	pthread_mutex_lock(&f->mu);
	if (f->n == f->cap) {
		fprintf(stderr, "fakeverbs: CQ overflow\n");
		abort();
	}
	struct ibv_wc *w = &f->wc[(f->head + f->n) % f->cap];
	memset(w, 0, sizeof(*w));
	w->wr_id = wr_id;
	w->status = IBV_WC_SUCCESS;
	w->opcode = op;
	w->byte_len = len;
	w->qp_num = qpn;
	f->n++;
	pthread_mutex_unlock(&f->mu);
}

static int f_poll_cq(struct ibv_cq *c, int num, struct ibv_wc *wc)
{
	struct fcq *f = (struct fcq *)c;
	int i;
	pthread_mutex_lock(&f->mu);
	for (i = 0; i < num && f->n > 0; i++) {
		wc[i] = f->wc[f->head];
		f->head = (f->head + 1) % f->cap;
		f->n--;
	}
	pthread_mutex_unlock(&f->mu);
	return i;
}

static int f_req_notify_cq(struct ibv_cq *c, int s) { (void)c; (void)s; return 0; }

static int f_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	(void)bad;
	for (; wr; wr = wr->next) {
		enum ibv_wc_opcode op = IBV_WC_SEND;
		uint32_t len = 0;
		for (int i = 0; i < wr->num_sge; i++)
			len += wr->sg_list[i].length;
		switch (wr->opcode) {
		case IBV_WR_RDMA_WRITE: case IBV_WR_RDMA_WRITE_WITH_IMM: op = IBV_WC_RDMA_WRITE; break;
		case IBV_WR_RDMA_READ: op = IBV_WC_RDMA_READ; break;
		case IBV_WR_ATOMIC_CMP_AND_SWP: op = IBV_WC_COMP_SWAP; break;
		case IBV_WR_ATOMIC_FETCH_AND_ADD: op = IBV_WC_FETCH_ADD; break;
		default: break;
		}
		if ((wr->send_flags & IBV_SEND_SIGNALED) || qp->qp_type == IBV_QPT_UD)
			cq_push(qp->send_cq, wr->wr_id, op, len, qp->qp_num);
	}
	return 0;
}

static int f_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	(void)bad;
	for (; wr; wr = wr->next) {
		uint32_t len = 0;
		for (int i = 0; i < wr->num_sge; i++)
			len += wr->sg_list[i].length;
		cq_push(qp->recv_cq, wr->wr_id, IBV_WC_RECV, len, qp->qp_num);
	}
	return 0;
}

struct ibv_device **ibv_get_device_list(int *n)
{
	strcpy(dev.name, "fake0");
	strcpy(dev.dev_name, "uverbs0");
	strcpy(dev.dev_path, "/nonexistent/uverbs0");
	strcpy(dev.ibdev_path, "/nonexistent/fake0");
	dev.node_type = IBV_NODE_CA;
	dev.transport_type = IBV_TRANSPORT_IB;
	list[0] = &dev;
	if (n)
		*n = 1;
	return list;
}

void ibv_free_device_list(struct ibv_device **l) { (void)l; }
const char *ibv_get_device_name(struct ibv_device *d) { return d->name; }
__be64 ibv_get_device_guid(struct ibv_device *d) { (void)d; return htobe64(0x1122334455667788ULL); }

struct ibv_context *ibv_open_device(struct ibv_device *d)
{
	struct ibv_context *c = calloc(1, sizeof(*c));
	c->device = d;
	c->cmd_fd = -1;
	c->async_fd = -1;
	c->num_comp_vectors = 1;
	pthread_mutex_init(&c->mutex, NULL);
	c->abi_compat = NULL; /* not extended: the inline helpers fall back to the plain calls */
	c->ops.poll_cq = f_poll_cq;
	c->ops.req_notify_cq = f_req_notify_cq;
	c->ops.post_send = f_post_send;
	c->ops.post_recv = f_post_recv;
	TRACE("open_device\n");
	return c;
}

int ibv_close_device(struct ibv_context *c) { free(c); return 0; }

int ibv_query_device(struct ibv_context *c, struct ibv_device_attr *a)
{
	(void)c;
	memset(a, 0, sizeof(*a));
	strcpy(a->fw_ver, "1.0");
	a->vendor_id = 0x1234;
	a->vendor_part_id = 0x5678;
	a->max_mr_size = 1ULL << 40;
	a->page_size_cap = 4096;
	a->max_qp = 1 << 16;
	a->max_qp_wr = 1 << 15;
	a->max_sge = 16;
	a->max_cq = 1 << 16;
	a->max_cqe = 1 << 20;
	a->max_mr = 1 << 16;
	a->max_pd = 1 << 16;
	a->max_qp_rd_atom = 16;
	a->max_qp_init_rd_atom = 16;
	a->max_res_rd_atom = 1 << 16;
	a->max_srq = 1 << 10;
	a->max_srq_wr = 1 << 14;
	a->max_srq_sge = 16;
	a->atomic_cap = IBV_ATOMIC_HCA;
	a->max_pkeys = 1;
	a->phys_port_cnt = 1;
	return 0;
}

int (ibv_query_port)(struct ibv_context *c, uint8_t port, struct _compat_ibv_port_attr *pa)
{
	(void)c;
	struct ibv_port_attr *a = (struct ibv_port_attr *)pa; /* the caller passes a whole one */
	if (port != 1)
		return EINVAL;
	memset(a, 0, sizeof(*a));
	a->state = IBV_PORT_ACTIVE;
	a->max_mtu = IBV_MTU_4096;
	a->active_mtu = getenv("FAKEVERBS_MTU") ? atoi(getenv("FAKEVERBS_MTU")) : IBV_MTU_1024;
	a->gid_tbl_len = 2;
	a->max_msg_sz = 1 << 30;
	a->pkey_tbl_len = 1;
	a->active_width = 2;
	a->active_speed = 32;
	a->phys_state = 5;
	a->link_layer = IBV_LINK_LAYER_ETHERNET;
	return 0;
}

static void fill_gid(int index, union ibv_gid *g)
{
	memset(g, 0, sizeof(*g));
	if (index == 0) { /* fe80::1 */
		g->raw[0] = 0xfe;
		g->raw[1] = 0x80;
		g->raw[15] = 1;
		return;
	}
	const char *ip = getenv("FAKEVERBS_IP") ? getenv("FAKEVERBS_IP") : "127.0.0.1";
	g->raw[10] = 0xff;
	g->raw[11] = 0xff;
	inet_pton(AF_INET, ip, &g->raw[12]);
}

int ibv_query_gid(struct ibv_context *c, uint8_t port, int index, union ibv_gid *g)
{
	(void)c; (void)port;
	if (index < 0 || index > 1)
		return EINVAL;
	fill_gid(index, g);
	return 0;
}

int _ibv_query_gid_ex(struct ibv_context *c, uint32_t port, uint32_t index, struct ibv_gid_entry *e, uint32_t flags, size_t sz)
{
	(void)c; (void)flags;
	if (index > 1)
		return EINVAL;
	memset(e, 0, sz);
	fill_gid(index, &e->gid);
	e->gid_index = index;
	e->port_num = port;
	e->gid_type = IBV_GID_TYPE_ROCE_V2;
	return 0;
}

int ibv_query_pkey(struct ibv_context *c, uint8_t port, int index, __be16 *pkey)
{
	(void)c; (void)port; (void)index;
	*pkey = htons(0xffff);
	return 0;
}

struct ibv_pd *ibv_alloc_pd(struct ibv_context *c)
{
	struct ibv_pd *pd = calloc(1, sizeof(*pd));
	pd->context = c;
	pd->handle = 1;
	return pd;
}

int ibv_dealloc_pd(struct ibv_pd *pd) { free(pd); return 0; }

struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova, unsigned int access)
{
	(void)iova; (void)access;
	struct ibv_mr *mr = calloc(1, sizeof(*mr));
	mr->context = pd->context;
	mr->pd = pd;
	mr->addr = addr;
	mr->length = len;
	mr->lkey = next_key;
	mr->rkey = next_key + 0x10000;
	next_key++;
	TRACE("reg_mr %p %zu\n", addr, len);
	return mr;
}

struct ibv_mr *(ibv_reg_mr)(struct ibv_pd *pd, void *addr, size_t len, int access)
{
	return ibv_reg_mr_iova2(pd, addr, len, (uintptr_t)addr, access);
}

struct ibv_mr *(ibv_reg_mr_iova)(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova, int access)
{
	return ibv_reg_mr_iova2(pd, addr, len, iova, access);
}

int ibv_dereg_mr(struct ibv_mr *mr) { free(mr); return 0; }

struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *c)
{
	struct ibv_comp_channel *ch = calloc(1, sizeof(*ch));
	ch->context = c;
	ch->fd = -1;
	return ch;
}

int ibv_destroy_comp_channel(struct ibv_comp_channel *ch) { free(ch); return 0; }

struct ibv_cq *ibv_create_cq(struct ibv_context *c, int cqe, void *cq_context, struct ibv_comp_channel *ch, int vec)
{
	(void)vec;
	struct fcq *f = calloc(1, sizeof(*f));
	f->cap = cqe < 1 << 16 ? 1 << 16 : cqe * 4;
	f->wc = calloc(f->cap, sizeof(*f->wc));
	pthread_mutex_init(&f->mu, NULL);
	f->cq.context = c;
	f->cq.channel = ch;
	f->cq.cq_context = cq_context;
	f->cq.cqe = cqe;
	TRACE("create_cq %d\n", cqe);
	return &f->cq;
}

int ibv_destroy_cq(struct ibv_cq *c) { struct fcq *f = (struct fcq *)c; free(f->wc); free(f); return 0; }
int ibv_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **ctx) { (void)ch; (void)cq; (void)ctx; errno = ENOSYS; return -1; }
void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int n) { (void)cq; (void)n; }

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *ia)
{
	struct fqp *f = calloc(1, sizeof(*f));
	f->qp.context = pd->context;
	f->qp.pd = pd;
	f->qp.send_cq = ia->send_cq;
	f->qp.recv_cq = ia->recv_cq;
	f->qp.srq = ia->srq;
	f->qp.qp_type = ia->qp_type;
	f->qp.qp_num = next_qpn++;
	f->qp.state = IBV_QPS_RESET;
	f->qp.qp_context = ia->qp_context;
	TRACE("create_qp type %d qpn %#x\n", ia->qp_type, f->qp.qp_num);
	return &f->qp;
}

int ibv_destroy_qp(struct ibv_qp *qp) { free(qp); return 0; }

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask)
{
	struct fqp *f = (struct fqp *)qp;
	if (mask & IBV_QP_STATE)
		qp->state = a->qp_state;
	f->attr = *a;
	TRACE("modify_qp %#x state %d mask %#x\n", qp->qp_num, a->qp_state, mask);
	return 0;
}

int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask, struct ibv_qp_init_attr *ia)
{
	(void)mask;
	struct fqp *f = (struct fqp *)qp;
	*a = f->attr;
	a->qp_state = qp->state;
	a->qkey = 0x11111111;
	if (ia)
		memset(ia, 0, sizeof(*ia));
	return 0;
}

struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
	(void)qp;
	fprintf(stderr, "fakeverbs: ibv_qp_to_qp_ex is not supported; run perftest with --use_old_post_send\n");
	return NULL;
}

struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *ia)
{
	(void)ia;
	struct ibv_srq *s = calloc(1, sizeof(*s));
	s->context = pd->context;
	s->pd = pd;
	return s;
}

int ibv_destroy_srq(struct ibv_srq *s) { free(s); return 0; }

struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *a)
{
	(void)a;
	struct ibv_ah *ah = calloc(1, sizeof(*ah));
	ah->context = pd->context;
	ah->pd = pd;
	return ah;
}

struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc, struct ibv_grh *grh, uint8_t port)
{
	(void)wc; (void)grh; (void)port;
	return ibv_create_ah(pd, NULL);
}

int ibv_destroy_ah(struct ibv_ah *ah) { free(ah); return 0; }
int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid) { (void)qp; (void)gid; (void)lid; return ENOSYS; }
int ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid) { (void)qp; (void)gid; (void)lid; return ENOSYS; }
