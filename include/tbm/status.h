/* Status codes of the library: every function returns 0 (or a count) or one
 * of these negative values; errno values appear only at the FUSE edge. */
#ifndef TBM_STATUS_H
#define TBM_STATUS_H

enum tbm_status {
    TBM_OK = 0,
    TBM_ERR_NOMEM = -1,    /* allocation failed */
    TBM_ERR_IO = -2,       /* the source could not be read (it may have shrunk) */
    TBM_ERR_SOURCE = -3,   /* the source is not usable at all */
    TBM_ERR_BROKEN = -4,   /* this file of a broken tensor cannot be served */
    TBM_ERR_PROBLEM = -5,  /* strict open refused a model with problems */
    TBM_ERR_STOPPED = -6,  /* given up (a self-test, a transfer): the daemon is stopping */
    TBM_ERR_NOATTR = -7,   /* no extended attribute of that name */
    TBM_ERR_CHANGED = -8,  /* the source changed in place since the mount */
    TBM_ERR_DENIED = -9,   /* the store refused the request's credentials */
    TBM_ERR_AGAIN = -10,   /* bytes of a remote source are on their way: ask again where a
                            * wait is allowed (a read made with TBM_READ_NOWAIT) */
    TBM_ERR_TRANSFER = -11 /* a remote source's transfer failed: the next request tries again */
};

#endif
