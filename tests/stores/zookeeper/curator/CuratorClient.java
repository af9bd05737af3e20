// Apache Curator's own recipes, driven from the command line, so that tests/stores/zookeeper/
// curator.bats can check that dlock and Curator share locks, semaphores and barriers. Compiled
// by the test (javac, Debian's libcurator-recipes-java); nothing of dlock's is used here.
//
// Usage: java -cp CLASSPATH CuratorClient HOST:PORT COMMAND PATH ARG...
//   mutex PATH HOLD                     InterProcessMutex
//   read PATH HOLD, write PATH HOLD     InterProcessReadWriteLock's read or write lock
//   semaphore PATH N HOLD               one lease of InterProcessSemaphoreV2(PATH, N)
//   barrier PATH PARTIES                DistributedDoubleBarrier(PATH, PARTIES): enter, leave
//   try-mutex PATH TIMEOUT_MS [HOLD], try-read …, try-write …, try-semaphore PATH N TIMEOUT_MS
//   [HOLD], try-barrier PATH PARTIES TIMEOUT_MS: the same, giving up after TIMEOUT_MS
//   leader PATH ID HOLD                 LeaderSelector(PATH) with id ID: takes leadership once,
//                                       holds it for HOLD, relinquishes it (takeLeadership returns)
//   leader-of PATH                      prints "NAME leader ID" (getLeader(); "NAME no-leader" when
//                                       none) and "NAME participant ID" per getParticipants(), an
//                                       id's newlines written \n
//   latch PATH ID HOLD, latch-of PATH   the same with LeaderLatch(PATH, ID): leads once (await),
//                                       holds for HOLD, closes the latch
// HOLD: how long to hold, in milliseconds, or a file: held until it exists (default 0).
//
// Each event is one line on stdout, "NAME EVENT" (NAME: the system property name, default
// "curator"), written in one write(2) as it happens, so that several clients appending to one
// file (>>) leave the events in the order they happened: "connected" (the session is up),
// "acquired"/"entered" (holds, or passed enter), "releasing"/"leaving" (about to let go),
// "released"/"left" (let go), "timed-out"; a leader's "acquired" when it takes leadership,
// "releasing" when it is about to relinquish it, "released" once its selector is closed. Exit 0
// when it held (and let go), 1 when it timed out, 2 on an error (usage, connection).
import java.io.File;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.barriers.DistributedDoubleBarrier;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.leader.LeaderSelector;
import org.apache.curator.framework.recipes.leader.LeaderSelectorListenerAdapter;
import org.apache.curator.framework.recipes.leader.Participant;
import org.apache.curator.framework.recipes.locks.InterProcessLock;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.retry.RetryNTimes;

public final class CuratorClient {
  private static final String NAME = System.getProperty("name", "curator");
  private static final PrintStream OUT = System.out;

  // One event line, in one write.
  private static synchronized void event(String what) {
    byte[] line = (NAME + " " + what + "\n").getBytes(StandardCharsets.UTF_8);
    OUT.write(line, 0, line.length);
    OUT.flush();
  }

  private static void usage(String why) {
    System.err.println("CuratorClient: " + why);
    System.err.println("usage: CuratorClient HOST:PORT (mutex|read|write) PATH HOLD"
        + " | semaphore PATH N HOLD | barrier PATH PARTIES"
        + " | try-(mutex|read|write) PATH TIMEOUT_MS [HOLD]"
        + " | try-semaphore PATH N TIMEOUT_MS [HOLD]"
        + " | try-barrier PATH PARTIES TIMEOUT_MS"
        + " | (leader|latch) PATH ID HOLD | (leader|latch)-of PATH");
    System.exit(2);
  }

  private static long number(String arg) {
    try {
      long n = Long.parseLong(arg);
      if (n >= 0) {
        return n;
      }
    } catch (NumberFormatException ignored) {
      // below
    }
    usage("not a number: " + arg);
    return 0;
  }

  // Holds for HOLD: milliseconds, or until the file exists.
  private static void hold(String spec) throws InterruptedException {
    if (spec == null || spec.isEmpty()) {
      return;
    }
    if (spec.chars().allMatch(Character::isDigit)) {
      Thread.sleep(Long.parseLong(spec));
      return;
    }
    File file = new File(spec);
    while (!file.exists()) {
      Thread.sleep(20);
    }
  }

  private static String arg(String[] args, int i) {
    return i < args.length ? args[i] : null;
  }

  public static void main(String[] args) throws Exception {
    if (args.length < 3) {
      usage("too few arguments");
    }
    String connect = args[0];
    String command = args[1];
    String path = args[2];
    boolean timed = command.startsWith("try-");
    String recipe = timed ? command.substring(4) : command;

    CuratorFramework client = CuratorFrameworkFactory.builder()
        .connectString(connect)
        .sessionTimeoutMs(30000)
        .connectionTimeoutMs(10000)
        .retryPolicy(new RetryNTimes(3, 200))
        .build();
    client.start();
    if (!client.blockUntilConnected(20, TimeUnit.SECONDS)) {
      System.err.println("CuratorClient: no connection to " + connect);
      System.exit(2);
    }
    event("connected");
    int status;
    try {
      switch (recipe) {
        case "mutex":
        case "read":
        case "write": {
          long timeout = timed ? number(arg(args, 3)) : -1;
          String holdSpec = arg(args, timed ? 4 : 3);
          InterProcessLock lock;
          if (recipe.equals("mutex")) {
            lock = new InterProcessMutex(client, path);
          } else {
            InterProcessReadWriteLock rw = new InterProcessReadWriteLock(client, path);
            lock = recipe.equals("read") ? rw.readLock() : rw.writeLock();
          }
          status = lock(lock, timeout, holdSpec);
          break;
        }
        case "semaphore": {
          int leases = (int) number(arg(args, 3));
          long timeout = timed ? number(arg(args, 4)) : -1;
          String holdSpec = arg(args, timed ? 5 : 4);
          status = semaphore(new InterProcessSemaphoreV2(client, path, leases), timeout, holdSpec);
          break;
        }
        case "barrier": {
          int parties = (int) number(arg(args, 3));
          long timeout = timed ? number(arg(args, 4)) : -1;
          status = barrier(new DistributedDoubleBarrier(client, path, parties), timeout);
          break;
        }
        case "leader": {
          String id = arg(args, 3);
          if (id == null) {
            usage("leader needs an id");
          }
          status = lead(client, path, id, arg(args, 4));
          break;
        }
        case "leader-of":
          status = leaderOf(client, path);
          break;
        case "latch": {
          String id = arg(args, 3);
          if (id == null) {
            usage("latch needs an id");
          }
          status = latch(client, path, id, arg(args, 4));
          break;
        }
        case "latch-of":
          status = latchOf(client, path);
          break;
        default:
          usage("unknown command: " + command);
          status = 2;
      }
    } finally {
      client.close();
    }
    System.exit(status);
  }

  private static int lock(InterProcessLock lock, long timeout, String holdSpec) throws Exception {
    if (timeout >= 0) {
      if (!lock.acquire(timeout, TimeUnit.MILLISECONDS)) {
        event("timed-out");
        return 1;
      }
    } else {
      lock.acquire();
    }
    event("acquired");
    hold(holdSpec);
    event("releasing");
    lock.release();
    event("released");
    return 0;
  }

  private static int semaphore(InterProcessSemaphoreV2 semaphore, long timeout, String holdSpec)
      throws Exception {
    Lease lease;
    if (timeout >= 0) {
      lease = semaphore.acquire(timeout, TimeUnit.MILLISECONDS);
      if (lease == null) {
        event("timed-out");
        return 1;
      }
    } else {
      lease = semaphore.acquire();
    }
    event("acquired");
    hold(holdSpec);
    event("releasing");
    semaphore.returnLease(lease);
    event("released");
    return 0;
  }

  // LeaderSelector: leads once (no requeue), for HOLD, then relinquishes leadership.
  private static int lead(CuratorFramework client, String path, String id, String holdSpec)
      throws Exception {
    CountDownLatch done = new CountDownLatch(1);
    LeaderSelector selector = new LeaderSelector(client, path, new LeaderSelectorListenerAdapter() {
      @Override
      public void takeLeadership(CuratorFramework c) throws Exception {
        try {
          event("acquired");
          hold(holdSpec);
          event("releasing");
        } finally {
          done.countDown();
        }
      }
    });
    selector.setId(id);
    selector.start();
    done.await();
    selector.close(); // its mutex is released once takeLeadership returned
    event("released");
    return 0;
  }

  private static String shown(String id) {
    return id.replace("\\", "\\\\").replace("\n", "\\n");
  }

  // What LeaderSelector reports of the election on PATH, without taking part.
  private static int leaderOf(CuratorFramework client, String path) throws Exception {
    LeaderSelector selector = new LeaderSelector(client, path, new LeaderSelectorListenerAdapter() {
      @Override
      public void takeLeadership(CuratorFramework c) {}
    });
    try {
      Participant leader = selector.getLeader();
      event(leader.isLeader() ? "leader " + shown(leader.getId()) : "no-leader");
      for (Participant p : selector.getParticipants()) {
        event("participant " + shown(p.getId()));
      }
    } catch (org.apache.zookeeper.KeeperException.NoNodeException e) {
      event("no-leader");
    }
    return 0;
  }

  // LeaderLatch: leads once (await), for HOLD, then closes the latch (its node goes).
  private static int latch(CuratorFramework client, String path, String id, String holdSpec)
      throws Exception {
    LeaderLatch latch = new LeaderLatch(client, path, id);
    latch.start();
    latch.await();
    event("acquired");
    hold(holdSpec);
    event("releasing");
    latch.close();
    event("released");
    return 0;
  }

  // What LeaderLatch reports of the election on PATH, without taking part.
  private static int latchOf(CuratorFramework client, String path) throws Exception {
    LeaderLatch latch = new LeaderLatch(client, path);
    try {
      Participant leader = latch.getLeader();
      event(leader.isLeader() ? "leader " + shown(leader.getId()) : "no-leader");
      for (Participant p : latch.getParticipants()) {
        event("participant " + shown(p.getId()));
      }
    } catch (org.apache.zookeeper.KeeperException.NoNodeException e) {
      event("no-leader");
    }
    return 0;
  }

  private static int barrier(DistributedDoubleBarrier barrier, long timeout) throws Exception {
    if (timeout >= 0) {
      if (!barrier.enter(timeout, TimeUnit.MILLISECONDS)) {
        event("timed-out");
        return 1;
      }
    } else {
      barrier.enter();
    }
    event("entered");
    event("leaving");
    if (timeout >= 0) {
      if (!barrier.leave(timeout, TimeUnit.MILLISECONDS)) {
        event("timed-out");
        return 1;
      }
    } else {
      barrier.leave();
    }
    event("left");
    return 0;
  }
}
