// A one-DataNode HDFS (Hadoop's own MiniDFSCluster) for the store tests:
//   java -cp CLASSES:JARS MiniHdfs BASEDIR NAMENODE_PORT HTTP_PORT
// prints "READY" once the NameNode is active and the DataNode registered,
// then serves until its standard input closes (the lab's stop).
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hdfs.MiniDFSCluster;

public class MiniHdfs {
    public static void main(String[] args) throws Exception {
        Configuration conf = new Configuration();
        conf.set("hdfs.minidfs.basedir", args[0]);
        conf.setBoolean("dfs.webhdfs.enabled", true);
        conf.set("dfs.namenode.http-address", "127.0.0.1:" + args[2]);
        conf.set("dfs.datanode.address", "127.0.0.1:0");
        conf.set("dfs.datanode.http.address", "127.0.0.1:0");
        conf.set("dfs.datanode.ipc.address", "127.0.0.1:0");
        conf.setBoolean("dfs.permissions.enabled", true);
        conf.set("dfs.replication", "1");
        MiniDFSCluster cluster = new MiniDFSCluster.Builder(conf)
                .nameNodePort(Integer.parseInt(args[1]))
                .nameNodeHttpPort(Integer.parseInt(args[2]))
                .numDataNodes(1)
                .format(true)
                .build();
        cluster.waitActive();
        System.out.println("READY " + cluster.getURI());
        System.out.flush();
        while (System.in.read() >= 0) {
            // serve until stdin closes
        }
        cluster.shutdown();
    }
}
