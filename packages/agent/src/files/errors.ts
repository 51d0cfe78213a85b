import { describeCause, ServiceError } from '../proto.js';

/** Maps a filesystem error to the agent's error codes (never a 5xx for a caller's mistake). */
export function fsError(err: unknown, path: string): ServiceError {
  if (err instanceof ServiceError) return err;
  const e = err as NodeJS.ErrnoException;
  switch (e?.code) {
    case 'ENOENT':
      return new ServiceError('FILE_NOT_FOUND', `File not found: ${path}`, { path });
    case 'ENOTDIR':
      return new ServiceError('NOT_A_DIRECTORY', `A parent of ${path} is not a directory`, { path });
    case 'EISDIR':
      return new ServiceError('NOT_A_FILE', `${path} is a directory, not a file`, { path });
    case 'EEXIST':
    case 'ENOTEMPTY':
      return new ServiceError('ALREADY_EXISTS', `${path} already exists`, { path });
    case 'EACCES':
    case 'EPERM':
    case 'EROFS':
      return new ServiceError('PERMISSION_DENIED', `Permission denied: ${path} (${e.code})`, { path });
    case 'ENOSPC':
    case 'EDQUOT':
      return new ServiceError('DISK_FULL', `No space left on the sandbox disk while writing ${path}`, { path });
    case 'EFBIG':
      return new ServiceError('FILE_TOO_LARGE', `${path}: file too large`, { path });
    case 'ENXIO':
    case 'ENODEV':
    case 'EOPNOTSUPP':
      // A device without a driver, a socket: the path exists but is no file to move.
      return new ServiceError('NOT_A_FILE', `${path} cannot be read or written as a file (${e.code})`, { path });
    case 'EIO':
      // On the pseudo filesystems (/proc/self/mem...) it means the same; on the sandbox's disk it is a real fault.
      if (/^\/(proc|sys|dev)\//.test(path)) return new ServiceError('NOT_A_FILE', `${path} cannot be read or written as a file (EIO)`, { path });
      return new ServiceError('INTERNAL_ERROR', `I/O error on ${path}`, { path }).withDetail(describeCause(err));
    case 'ENAMETOOLONG':
    case 'ELOOP':
    case 'EINVAL':
      return new ServiceError('INVALID_PATH', `Invalid path ${path} (${e.code})`, { path });
    default:
      // Not an errno the caller can act on, or a bug of ours: a 500 whose incident keeps the cause.
      return new ServiceError('INTERNAL_ERROR', `a file operation on ${path} failed`, { path }).withDetail(describeCause(err));
  }
}
